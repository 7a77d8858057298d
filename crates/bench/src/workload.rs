//! Pure, seeded workload generators: value sizes, operation mix and the checkable value
//! pattern used by `--verify`. Key choice (uniform, scrambled zipfian, the alternating
//! hot set) and the random number generator are the workspace's `workload` crate,
//! shared with fogsim, and re-exported here.
//!
//! Nothing here touches the network or the clock, so every distribution can be tested
//! by counting draws from a fixed seed.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};

pub use ::workload::{KeyDistribution, KeyGenerator, Rng};

/// 64-bit FNV-1a of the little-endian bytes of `value`: spreads the value pattern's
/// starting offset over the alphabet by key.
pub fn fnv1a_64(value: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for byte in value.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

/// Value sizes of writes, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSize {
    Fixed(usize),
    /// Uniform in [min, max], both inclusive.
    Uniform {
        min: usize,
        max: usize,
    },
    /// Drawn from an empirical distribution (`--value-size-file`).
    Empirical(Arc<EmpiricalSizes>),
}

/// Bigger values than this are refused: memcached's default item limit is 1 MiB.
pub const VALUE_MAX_BYTES: usize = 1024 * 1024;
/// Largest value-size file read (a table of sizes, not data).
const SIZE_FILE_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Most entries of a value-size table.
const SIZE_TABLE_MAX_ENTRIES: usize = 1_000_000;

/// Sizes with weights: size i is drawn with probability weight_i / sum of weights.
#[derive(Debug, PartialEq)]
pub struct EmpiricalSizes {
    /// Where the table came from (a path), for the report.
    pub source: String,
    sizes: Vec<usize>,
    /// Running sum of the weights, one per size, strictly increasing.
    cumulative: Vec<f64>,
}

impl EmpiricalSizes {
    /// Parses a table: per line `size` or `size weight` (weight a non-negative number,
    /// 1 when absent), blank lines and `#` comments ignored. Errors name `source` and
    /// the line number.
    pub fn parse(text: &str, source: &str) -> anyhow::Result<EmpiricalSizes> {
        let mut sizes = Vec::new();
        let mut cumulative = Vec::new();
        let mut total = 0.0f64;
        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(size_text), weight_text, None) =
                (fields.next(), fields.next(), fields.next())
            else {
                bail!("{source}:{line_no}: expected \"size\" or \"size weight\", got {raw:?}");
            };
            let size: usize = size_text.parse().map_err(|_| {
                anyhow::anyhow!(
                    "{source}:{line_no}: size {size_text:?} is not a whole number of bytes"
                )
            })?;
            if size == 0 || size > VALUE_MAX_BYTES {
                bail!("{source}:{line_no}: size {size} is outside [1, {VALUE_MAX_BYTES}] bytes");
            }
            let weight: f64 = match weight_text {
                None => 1.0,
                Some(text) => text
                    .parse()
                    .ok()
                    .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "{source}:{line_no}: weight {text:?} is not a non-negative number"
                        )
                    })?,
            };
            if weight == 0.0 {
                // Listed but never drawn.
                continue;
            }
            if sizes.len() >= SIZE_TABLE_MAX_ENTRIES {
                bail!("{source}:{line_no}: more than {SIZE_TABLE_MAX_ENTRIES} sizes");
            }
            total += weight;
            sizes.push(size);
            cumulative.push(total);
        }
        if sizes.is_empty() {
            bail!("{source}: no size with a positive weight");
        }
        Ok(EmpiricalSizes {
            source: source.to_owned(),
            sizes,
            cumulative,
        })
    }

    /// Distinct entries of the table (with a positive weight).
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The probability of drawing `size` (summed over the lines that list it).
    pub fn probability(&self, size: usize) -> f64 {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let mut weight = 0.0;
        let mut previous = 0.0;
        for (&s, &c) in self.sizes.iter().zip(&self.cumulative) {
            if s == size {
                weight += c - previous;
            }
            previous = c;
        }
        if total > 0.0 {
            weight / total
        } else {
            0.0
        }
    }

    fn bounds(&self) -> (usize, usize) {
        let min = self.sizes.iter().copied().min().unwrap_or(1);
        let max = self.sizes.iter().copied().max().unwrap_or(1);
        (min, max)
    }

    fn draw(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let point = rng.next_f64() * total;
        let index = self.cumulative.partition_point(|&c| c <= point);
        self.sizes[index.min(self.sizes.len() - 1)]
    }
}

impl ValueSize {
    /// Parses `"1024"` or `"64-4096"`.
    pub fn parse(text: &str) -> anyhow::Result<ValueSize> {
        let size = match text.split_once('-') {
            None => ValueSize::Fixed(text.trim().parse().context("value size")?),
            Some((min, max)) => ValueSize::Uniform {
                min: min.trim().parse().context("value size minimum")?,
                max: max.trim().parse().context("value size maximum")?,
            },
        };
        let (min, max) = size.bounds();
        if min == 0 || min > max || max > VALUE_MAX_BYTES {
            bail!("value sizes must satisfy 1 <= min <= max <= {VALUE_MAX_BYTES}, got {text:?}");
        }
        Ok(size)
    }

    /// Reads an empirical size table (see [`EmpiricalSizes::parse`]) from `path`.
    pub fn from_file(path: &Path) -> anyhow::Result<ValueSize> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening value-size file {}", path.display()))?;
        let mut text = String::new();
        file.take(SIZE_FILE_MAX_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading value-size file {}", path.display()))?;
        if text.len() as u64 > SIZE_FILE_MAX_BYTES {
            bail!(
                "value-size file {} is larger than {SIZE_FILE_MAX_BYTES} bytes",
                path.display()
            );
        }
        let sizes = EmpiricalSizes::parse(&text, &path.display().to_string())?;
        Ok(ValueSize::Empirical(Arc::new(sizes)))
    }

    pub fn bounds(&self) -> (usize, usize) {
        match self {
            ValueSize::Fixed(size) => (*size, *size),
            ValueSize::Uniform { min, max } => (*min, *max),
            ValueSize::Empirical(sizes) => sizes.bounds(),
        }
    }

    /// How the report names the sizes: `1024`, `64-4096` or `file:<path>`.
    pub fn describe(&self) -> String {
        match self {
            ValueSize::Fixed(size) => size.to_string(),
            ValueSize::Uniform { min, max } => format!("{min}-{max}"),
            ValueSize::Empirical(sizes) => format!("file:{}", sizes.source),
        }
    }

    pub fn next_size(&self, rng: &mut Rng) -> usize {
        match self {
            ValueSize::Fixed(size) => *size,
            ValueSize::Uniform { min, max } => min + rng.below((max - min + 1) as u64) as usize,
            ValueSize::Empirical(sizes) => sizes.draw(rng),
        }
    }
}

/// The operations fogbench issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Get,
    Set,
}

impl OpKind {
    pub const ALL: [OpKind; 2] = [OpKind::Get, OpKind::Set];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Set => "set",
        }
    }

    pub fn index(self) -> usize {
        match self {
            OpKind::Get => 0,
            OpKind::Set => 1,
        }
    }
}

/// The key as sent on the wire: `<prefix><id>`.
pub fn write_key(prefix: &str, key_id: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(key_id.to_string().as_bytes());
}

const PATTERN_ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Appends the checkable value of `key_id` with `len_bytes` bytes: it starts with
/// `<key_id>:<len_bytes>:` (cut to fit) and continues with a key-dependent rotation of
/// [`PATTERN_ALPHABET`], so a value of another key, a truncated, shifted or extended
/// value, or a corrupted byte all fail [`check_value`], whatever `--value-size` wrote it.
pub fn write_value(key_id: u64, len_bytes: usize, out: &mut Vec<u8>) {
    let header = value_header(key_id, len_bytes);
    let header_bytes = &header.as_bytes()[..header.len().min(len_bytes)];
    out.extend_from_slice(header_bytes);
    let offset = pattern_offset(key_id);
    for position in header_bytes.len()..len_bytes {
        out.push(PATTERN_ALPHABET[(offset + position) % PATTERN_ALPHABET.len()]);
    }
}

fn value_header(key_id: u64, len_bytes: usize) -> String {
    format!("{key_id}:{len_bytes}:")
}

fn pattern_offset(key_id: u64) -> usize {
    (fnv1a_64(key_id) % PATTERN_ALPHABET.len() as u64) as usize
}

/// True if `value` is exactly what [`write_value`] produces for `key_id` at its length.
pub fn check_value(key_id: u64, value: &[u8]) -> bool {
    let header = value_header(key_id, value.len());
    let header_len = header.len().min(value.len());
    if value[..header_len] != header.as_bytes()[..header_len] {
        return false;
    }
    let offset = pattern_offset(key_id);
    value[header_len..].iter().enumerate().all(|(i, &byte)| {
        byte == PATTERN_ALPHABET[(offset + header_len + i) % PATTERN_ALPHABET.len()]
    })
}

/// Chooses get or set with probability `get_ratio` of a get.
pub fn next_op(get_ratio: f64, rng: &mut Rng) -> OpKind {
    if rng.next_f64() < get_ratio {
        OpKind::Get
    } else {
        OpKind::Set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_sizes_parse_and_stay_in_bounds() {
        assert_eq!(ValueSize::parse("1024").unwrap(), ValueSize::Fixed(1024));
        let sizes = ValueSize::parse("10-20").unwrap();
        assert_eq!(sizes, ValueSize::Uniform { min: 10, max: 20 });
        let mut rng = Rng::new(5, 0);
        let mut seen = [false; 21];
        for _ in 0..10_000 {
            let size = sizes.next_size(&mut rng);
            assert!((10..=20).contains(&size));
            seen[size] = true;
        }
        assert!(seen[10..=20].iter().all(|&s| s));
        for bad in ["0", "20-10", "x", "1-2000000"] {
            assert!(ValueSize::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn value_size_tables_are_drawn_with_their_weights() {
        let table = "# sizes seen in production\n\n100 1\n1000 3 # most common\n  5000\n7 0\n";
        let sizes = EmpiricalSizes::parse(table, "sizes.txt").unwrap();
        assert_eq!(sizes.len(), 3, "the zero-weight line is never drawn");
        assert_eq!(sizes.probability(1000), 0.6);
        let size = ValueSize::Empirical(Arc::new(sizes));
        assert_eq!(size.bounds(), (100, 5000));
        assert_eq!(size.describe(), "file:sizes.txt");
        let mut rng = Rng::new(17, 0);
        let draws = 100_000;
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..draws {
            *counts.entry(size.next_size(&mut rng)).or_insert(0u32) += 1;
        }
        assert_eq!(
            counts.keys().copied().collect::<Vec<_>>(),
            [100, 1000, 5000]
        );
        for (value, expected) in [(100, 0.2), (1000, 0.6), (5000, 0.2)] {
            let share = f64::from(counts[&value]) / f64::from(draws);
            assert!((share - expected).abs() < 0.01, "{value}: {share}");
        }
        // Fractional weights and a repeated size (its weights add up).
        let sizes = EmpiricalSizes::parse("10 0.25\n20 0.5\n10 0.25\n", "t").unwrap();
        assert_eq!(sizes.probability(10), 0.5);
        let one = ValueSize::Empirical(Arc::new(EmpiricalSizes::parse("42", "t").unwrap()));
        assert!((0..100).all(|_| one.next_size(&mut rng) == 42));
    }

    #[test]
    fn bad_value_size_tables_name_the_line() {
        let error = |text: &str| {
            EmpiricalSizes::parse(text, "sizes.txt")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error("100\nabc\n"),
            "sizes.txt:2: size \"abc\" is not a whole number of bytes"
        );
        assert_eq!(
            error("# c\n0\n"),
            "sizes.txt:2: size 0 is outside [1, 1048576] bytes"
        );
        assert_eq!(
            error("1048577"),
            "sizes.txt:1: size 1048577 is outside [1, 1048576] bytes"
        );
        assert_eq!(
            error("10 -1"),
            "sizes.txt:1: weight \"-1\" is not a non-negative number"
        );
        assert_eq!(
            error("10 NaN"),
            "sizes.txt:1: weight \"NaN\" is not a non-negative number"
        );
        assert_eq!(
            error("1\n2\n3 1 x\n"),
            "sizes.txt:3: expected \"size\" or \"size weight\", got \"3 1 x\""
        );
        assert_eq!(
            error("# only comments\n"),
            "sizes.txt: no size with a positive weight"
        );
        assert_eq!(error("5 0\n"), "sizes.txt: no size with a positive weight");
    }

    #[test]
    fn value_size_files_are_read() {
        let path = std::env::temp_dir().join(format!("fogbench-sizes-{}.txt", std::process::id()));
        std::fs::write(&path, "64 1\n4096 1\n").unwrap();
        let size = ValueSize::from_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(size.bounds(), (64, 4096));
        let missing = ValueSize::from_file(Path::new("/nonexistent/fogbench-sizes")).unwrap_err();
        assert!(format!("{missing:#}").contains("/nonexistent/fogbench-sizes"));
    }

    #[test]
    fn values_check_against_their_own_key_only() {
        for len in [1, 2, 6, 9, 10, 50, 100] {
            let mut value = Vec::new();
            write_value(12345, len, &mut value);
            assert_eq!(value.len(), len);
            assert!(check_value(12345, &value), "len {len}");
            if len >= 10 {
                assert!(!check_value(12346, &value));
                let mut corrupted = value.clone();
                corrupted[len - 1] ^= 1;
                assert!(!check_value(12345, &corrupted));
                assert!(!check_value(12345, &value[..len - 1]), "truncated");
                let mut extended = value.clone();
                extended.push(b'x');
                assert!(!check_value(12345, &extended), "extended");
            }
        }
        let mut value = Vec::new();
        write_value(1, 20, &mut value);
        assert!(value.starts_with(b"1:20:"));
    }
}
