//! Just enough PromQL reading to list what a query selects: each metric name with its label
//! matchers, and the labels of `by (...)` / `without (...)` / `on (...)` / `ignoring (...)`
//! clauses. Strings, ranges (`[5m]`), numbers and Grafana variables (`$job`) are skipped.

/// One metric selector: `name{label op "value", ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: String,
    /// `(label, op, value)`, op one of `=`, `!=`, `=~`, `!~`.
    pub matchers: Vec<(String, String, String)>,
}

/// What one query refers to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refs {
    pub selectors: Vec<Selector>,
    pub grouping: Vec<String>,
}

const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
/// Aggregation operators: `sum by (x) (...)` puts the clause between the name and `(`.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const CLAUSES: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn is_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_part(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

struct Scan<'a> {
    s: &'a [char],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }
    fn ident(&mut self) -> String {
        let start = self.i;
        while self.peek().is_some_and(is_part) {
            self.i += 1;
        }
        self.s[start..self.i].iter().collect()
    }
    fn string(&mut self) -> Result<String, String> {
        let quote = self.peek().ok_or("end of query in a string")?;
        self.i += 1;
        let mut out = String::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '\\' => {
                    if let Some(n) = self.peek() {
                        out.push(n);
                        self.i += 1;
                    }
                }
                c if c == quote => return Ok(out),
                c => out.push(c),
            }
        }
        Err("unterminated string".into())
    }
    fn skip_to(&mut self, end: char) {
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == end {
                return;
            }
        }
    }
    fn matchers(&mut self) -> Result<Vec<(String, String, String)>, String> {
        self.i += 1; // `{`
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some('}') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(',') => self.i += 1,
                Some(c) if is_start(c) => {
                    let label = self.ident();
                    self.skip_ws();
                    let mut op = String::new();
                    while let Some(c @ ('=' | '!' | '~')) = self.peek() {
                        op.push(c);
                        self.i += 1;
                    }
                    self.skip_ws();
                    let value = self.string()?;
                    out.push((label, op, value));
                }
                other => return Err(format!("unexpected {other:?} in label matchers")),
            }
        }
    }
    fn labels(&mut self) -> Vec<String> {
        self.i += 1; // `(`
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            if c == ')' {
                self.i += 1;
                break;
            }
            if is_start(c) {
                out.push(self.ident());
            } else {
                self.i += 1;
            }
        }
        out
    }
}

/// The selectors and grouping labels of `expr`.
pub fn refs(expr: &str) -> Result<Refs, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut s = Scan { s: &chars, i: 0 };
    let mut out = Refs::default();
    while let Some(c) = s.peek() {
        match c {
            '"' | '\'' | '`' => {
                s.string()?;
            }
            '[' => s.skip_to(']'),
            '$' => {
                s.i += 1;
                s.ident();
            }
            '{' => return Err("a selector without a metric name".into()),
            c if c.is_ascii_digit() || c == '.' => {
                while s.peek().is_some_and(|c| is_part(c) || c == '.') {
                    s.i += 1;
                }
            }
            c if is_start(c) => {
                let word = s.ident();
                s.skip_ws();
                let next = s.peek();
                if CLAUSES.contains(&word.as_str()) {
                    if next == Some('(') {
                        out.grouping.extend(s.labels());
                    }
                } else if next == Some('(')
                    || KEYWORDS.contains(&word.as_str())
                    || AGGREGATIONS.contains(&word.as_str())
                {
                    // A function call or an operator keyword.
                } else {
                    let matchers = if next == Some('{') {
                        s.matchers()?
                    } else {
                        Vec::new()
                    };
                    out.selectors.push(Selector {
                        metric: word,
                        matchers,
                    });
                }
            }
            _ => s.i += 1,
        }
    }
    Ok(out)
}

/// The `expr:` values of a Prometheus rules file (single line or a `|` block).
pub fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        i += 1;
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest != "|" && rest != "|-" {
            out.push(rest.to_owned());
            continue;
        }
        let mut block = String::new();
        while i < lines.len() {
            let l = lines[i];
            let ind = l.len() - l.trim_start().len();
            if !l.trim().is_empty() && ind <= indent {
                break;
            }
            block.push_str(l.trim());
            block.push('\n');
            i += 1;
        }
        out.push(block);
    }
    out
}
