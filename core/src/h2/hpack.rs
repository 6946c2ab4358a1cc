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
const CODES_OF_LEN: [u16; 31] = [
    0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3, 0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19,
    29, 0, 4,
];

/// The symbols of RFC 7541 Appendix B in the order of their codes (shortest first); 256 is
/// EOS. The code is canonical (each length's codes follow the previous length's, shifted), so
/// these and [`CODES_OF_LEN`] are the whole table.
const SYMBOLS: [u16; 257] = [
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

/// Decode a Huffman-coded string (§5.2): how many octets it holds and the first of them.
pub(crate) fn huffman_decode(bytes: &[u8]) -> Result<(usize, Option<u8>), HpackError> {
    let mut count = 0usize;
    let mut first_symbol = None;
    // The code read so far, its length, and where codes of that length start (canonical).
    let (mut code, mut len, mut start, mut index) = (0u32, 0usize, 0u32, 0usize);
    for &byte in bytes {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            let n = u32::from(CODES_OF_LEN[len]);
            if let Some(offset) = code.checked_sub(start).filter(|&o| o < n) {
                let symbol = SYMBOLS[index + offset as usize];
                let Ok(octet) = u8::try_from(symbol) else {
                    return Err(HpackError::Huffman); // EOS inside a string
                };
                first_symbol.get_or_insert(octet);
                count += 1;
                (code, len, start, index) = (0, 0, 0, 0);
            } else {
                index += n as usize;
                start = (start + n) << 1;
                if len == 30 {
                    return Err(HpackError::Huffman);
                }
            }
        }
    }
    // What is left must be fewer than 8 bits, all ones (EOS's first bits, §5.2).
    if len >= 8 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok((count, first_symbol))
}
