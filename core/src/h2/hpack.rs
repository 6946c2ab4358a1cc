//! Just enough of an HPACK decoder (RFC 7541) to tell which fields of a header block are
//! pseudo-header fields: the dynamic table is followed entry by entry (its names' lengths and
//! whether they are pseudo, its sizes and evictions), values are skipped unless an entry needs
//! their decoded length. A field's name can come from the dynamic table, so every block of a
//! connection must pass through the same [`Table`], in order, as through h2's own decoder.

use std::collections::VecDeque;

/// Why a header block could not be followed (h2's decoder refuses each of these as well, as a
/// `COMPRESSION_ERROR` that ends the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ended inside a representation.
    Truncated,
    /// An integer longer than 5 octets (h2's limit).
    Integer,
    /// Index 0, or an index past the static and dynamic tables.
    Index,
    /// A Huffman string with an EOS symbol, or padding that is not EOS's first bits, or 8 bits
    /// or more of it.
    Huffman,
    /// A dynamic table size update above the limit, or after a field.
    SizeUpdate,
}

/// One dynamic table entry: what a later reference to it needs.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Its size (name and value lengths plus 32, RFC 7541 §4.1).
    size: usize,
    /// The name's length, for an entry that takes this name by index.
    name_len: usize,
    /// The name starts with `:`.
    pseudo: bool,
}

/// The decoder's dynamic table, as far as names go.
#[derive(Debug)]
pub(crate) struct Table {
    /// Newest first (index 62 is the front).
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// `SETTINGS_HEADER_TABLE_SIZE` this endpoint advertised: the most a size update may ask.
    limit: usize,
}

/// The static table's names (RFC 7541 Appendix A) by index − 1: their lengths; indexes 1–14
/// are the pseudo-header fields.
const STATIC_NAME_LEN: [u8; 61] = [
    10, 7, 7, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, // :authority .. :status
    14, 15, 15, 13, 6, 27, 3, 5, 13, 13, 19, 16, 16, 14, 16, 13, 12, 6, 4, 4, 6, 7, 4, 4, 8, 17,
    13, 8, 19, 13, 4, 8, 12, 18, 19, 5, 7, 7, 11, 6, 10, 25, 17, 10, 4, 3, 16,
];

/// Static indexes up to this one name pseudo-header fields.
const LAST_STATIC_PSEUDO: usize = 14;

impl Table {
    /// A table whose size updates may ask for at most `limit` bytes (the table starts there).
    pub(crate) fn new(limit: usize) -> Table {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max: limit,
            limit,
        }
    }

    /// Follow one complete header block; whether any of its fields is a pseudo-header field.
    pub(crate) fn block(&mut self, mut b: &[u8]) -> Result<bool, HpackError> {
        let mut pseudo = false;
        let mut fields = false;
        while let Some(&first) = b.first() {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = integer(&mut b, 7)?;
                pseudo |= self.name(index)?.1;
                fields = true;
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing (§6.2.1): the entry is added.
                let (name_len, name_pseudo) = self.literal_name(&mut b, 6)?;
                let value_len = string(&mut b, false)?.0;
                pseudo |= name_pseudo;
                fields = true;
                self.insert(Entry {
                    size: name_len + value_len + 32,
                    name_len,
                    pseudo: name_pseudo,
                });
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the block's first field.
                let size = integer(&mut b, 5)?;
                if fields || size > self.limit {
                    return Err(HpackError::SizeUpdate);
                }
                self.max = size;
                self.evict(0);
            } else {
                // Literal without indexing or never indexed (§6.2.2, §6.2.3).
                let name_pseudo = self.literal_name(&mut b, 4)?.1;
                string(&mut b, false)?;
                pseudo |= name_pseudo;
                fields = true;
            }
        }
        Ok(pseudo)
    }

    /// A literal's name: by index (the prefix's integer) or as a string (index 0).
    fn literal_name(&self, b: &mut &[u8], prefix: u8) -> Result<(usize, bool), HpackError> {
        match integer(b, prefix)? {
            0 => {
                let (len, first) = string(b, true)?;
                Ok((len, first == Some(b':')))
            }
            index => self.name(index),
        }
    }

    /// The name at `index`: its length and whether it is pseudo.
    fn name(&self, index: usize) -> Result<(usize, bool), HpackError> {
        match index {
            0 => Err(HpackError::Index),
            1..=61 => Ok((
                usize::from(STATIC_NAME_LEN[index - 1]),
                index <= LAST_STATIC_PSEUDO,
            )),
            _ => self
                .entries
                .get(index - 62)
                .map(|e| (e.name_len, e.pseudo))
                .ok_or(HpackError::Index),
        }
    }

    fn insert(&mut self, e: Entry) {
        // An entry larger than the table empties it and is not added (§4.4).
        self.evict(e.size);
        if e.size <= self.max {
            self.size += e.size;
            self.entries.push_front(e);
        }
    }

    /// Evict the oldest entries until `room` more bytes fit (or the table is empty).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.entries.pop_back() {
                Some(old) => self.size -= old.size,
                None => break,
            }
        }
    }
}

/// An integer with an `n`-bit prefix (§5.1), at most 5 octets as h2 reads it.
fn integer(b: &mut &[u8], n: u8) -> Result<usize, HpackError> {
    let (&first, rest) = b.split_first().ok_or(HpackError::Truncated)?;
    let mask = (1u16 << n) as usize - 1;
    let mut value = usize::from(first) & mask;
    *b = rest;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    for octets in 1.. {
        if octets == 5 {
            return Err(HpackError::Integer);
        }
        let (&next, rest) = b.split_first().ok_or(HpackError::Truncated)?;
        *b = rest;
        value += usize::from(next & 0x7f) << shift;
        shift += 7;
        if next & 0x80 == 0 {
            break;
        }
    }
    Ok(value)
}

/// A string literal (§5.2): its decoded length and, when `first` is asked for, its first
/// decoded octet. A Huffman-coded string is decoded only as far as these need: a value that
/// no entry keeps is skipped undecoded.
fn string(b: &mut &[u8], first: bool) -> Result<(usize, Option<u8>), HpackError> {
    let huffman = b.first().is_some_and(|&o| o & 0x80 != 0);
    let len = integer(b, 7)?;
    if b.len() < len {
        return Err(HpackError::Truncated);
    }
    let (bytes, rest) = b.split_at(len);
    *b = rest;
    if !huffman {
        return Ok((len, if first { bytes.first().copied() } else { None }));
    }
    huffman_decode(bytes)
}

/// Codes of each length, 0..=30 bits, of the canonical Huffman code of RFC 7541 Appendix B.
pub(super) const CODES_OF_LEN: [u16; 31] = [
    0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3, 0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19,
    29, 0, 4,
];

/// The symbols of RFC 7541 Appendix B in the order of their codes (shortest first); 256 is
/// EOS. The code is canonical (each length's codes follow the previous length's, shifted), so
/// these and [`CODES_OF_LEN`] are the whole table.
pub(super) const SYMBOLS: [u16; 257] = [
    48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57,
    61, 65, 95, 98, 100, 102, 103, 104, 108, 109, 110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71,
    72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107, 113, 118, 119,
    120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39, 43, 124, 35, 62, 0, 36, 64, 91,
    93, 126, 94, 125, 60, 96, 123, 92, 195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161,
    167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156,
    160, 163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232, 233, 1,
    135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166, 168, 174,
    175, 180, 182, 183, 188, 191, 197, 231, 239, 9, 142, 144, 145, 148, 159, 171, 206, 215, 225,
    236, 237, 199, 207, 234, 235, 192, 193, 200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242,
    243, 255, 203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252,
    253, 254, 2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28,
    29, 30, 31, 127, 220, 249, 10, 13, 22, 256,
];

/// One step of the decoder: what reading a 4-bit chunk does from a given state. The code's
/// shortest codes are 5 bits long, so a chunk completes at most one symbol.
#[derive(Clone, Copy)]
struct Step {
    /// The state after the chunk: the tree node the bits read since the last symbol lead to.
    next: u8,
    /// The symbol the chunk completed, when [`EMIT`] is set.
    symbol: u8,
    /// [`EMIT`], [`FAIL`].
    flags: u8,
}

/// The chunk completed a symbol.
const EMIT: u8 = 1;
/// The chunk completed EOS, which a string must not hold (§5.2).
const FAIL: u8 = 2;

/// The code as a binary tree: the 256 internal nodes (0 is the root), each child either an
/// internal node or, with [`LEAF`] set, a symbol of [`SYMBOLS`] (256 is EOS).
const LEAF: u16 = 0x8000;

/// The internal nodes' children ([0] for bit 0), built from the canonical code.
const TREE: [[u16; 2]; 256] = {
    let mut tree = [[0u16; 2]; 256];
    let mut nodes = 1usize;
    let (mut code, mut len, mut i) = (0u32, 0usize, 0usize);
    while len < CODES_OF_LEN.len() {
        let mut k = 0;
        while k < CODES_OF_LEN[len] {
            // Walk `code`'s first len − 1 bits from the root, adding nodes as needed.
            let mut node = 0usize;
            let mut bit = len;
            while bit > 1 {
                bit -= 1;
                let b = ((code >> bit) & 1) as usize;
                if tree[node][b] == 0 {
                    tree[node][b] = nodes as u16;
                    nodes += 1;
                }
                node = tree[node][b] as usize;
            }
            tree[node][(code & 1) as usize] = LEAF | SYMBOLS[i];
            i += 1;
            code += 1;
            k += 1;
        }
        code <<= 1;
        len += 1;
    }
    assert!(nodes == 256 && i == 257);
    tree
};

/// The states in which a string may end: the root, or a node reached by fewer than 8 ones
/// (padding is EOS's first bits and shorter than an octet, §5.2).
const ACCEPT: [bool; 256] = {
    let mut accept = [false; 256];
    accept[0] = true;
    let (mut node, mut depth) = (0usize, 0);
    while depth < 7 {
        node = TREE[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }
    accept
};

/// For each state and 4-bit chunk (high bit first), the step it makes.
const STEPS: [[Step; 16]; 256] = {
    let none = Step {
        next: 0,
        symbol: 0,
        flags: 0,
    };
    let mut steps = [[none; 16]; 256];
    let mut state = 0;
    while state < 256 {
        let mut chunk = 0;
        while chunk < 16 {
            let mut step = none;
            let mut node = state;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = TREE[node][(chunk >> bit) & 1];
                if child & LEAF == 0 {
                    node = child as usize;
                } else if child == LEAF | 256 {
                    step.flags = FAIL;
                    break;
                } else {
                    step.symbol = child as u8;
                    step.flags = EMIT;
                    node = 0;
                }
            }
            step.next = node as u8;
            steps[state][chunk] = step;
            chunk += 1;
        }
        state += 1;
    }
    steps
};

/// Decode a Huffman-coded string (§5.2): how many octets it holds and the first of them. A
/// table walk, four bits at a time, through the code's tree.
pub(crate) fn huffman_decode(bytes: &[u8]) -> Result<(usize, Option<u8>), HpackError> {
    let mut count = 0usize;
    let mut first_symbol = None;
    let mut state = 0usize;
    for &byte in bytes {
        for chunk in [byte >> 4, byte & 0x0f] {
            let step = STEPS[state][usize::from(chunk)];
            if step.flags & FAIL != 0 {
                return Err(HpackError::Huffman); // EOS inside a string
            }
            if step.flags & EMIT != 0 {
                if count == 0 {
                    first_symbol = Some(step.symbol);
                }
                count += 1;
            }
            state = usize::from(step.next);
        }
    }
    if !ACCEPT[state] {
        return Err(HpackError::Huffman);
    }
    Ok((count, first_symbol))
}
