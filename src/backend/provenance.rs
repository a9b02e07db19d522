//! Which kernel entries have run on real hardware: the records of kernels/proven.tsv
//! (entry, SASS architecture, SHA-256 of its machine code, card, day, kit, run folder)
//! matched against the hashes of the entries this binary ships
//! ([`kernels::KERNEL_SASS`], written by build.rs). An entry is proven on an
//! architecture when a record's hash is its shipped hash: a change that alters its
//! instructions unproves it, a change elsewhere in its file does not. The table of
//! docs/cuda.md and the README's line are generated from here
//! ([`markdown_table`], [`summary_line`]; a test keeps them in step).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::kernels;

/// The provenance file, embedded.
const PROVEN_TSV: &str = include_str!("../../kernels/proven.tsv");

/// One hardware record: `entry`'s machine code for `arch` (`sm_90`, `sm_90a`) hashed
/// `sass` passed the kit's parity tests on `card` on `date`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub entry: &'static str,
    pub arch: &'static str,
    pub sass: &'static str,
    pub card: &'static str,
    pub date: &'static str,
    pub kit: &'static str,
    pub run: &'static str,
}

/// The records of `text` (kernels/proven.tsv's format: `#` comments, seven tab-separated
/// fields); an error names the line.
pub fn parse(text: &'static str) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&'static str> = line.split('\t').collect();
        let [entry, arch, sass, card, date, kit, run] = f[..] else {
            return Err(format!(
                "kernels/proven.tsv line {}: {} fields, expected 7 (entry, arch, sass_sha256, \
                 card, date, kit, run)",
                n + 1,
                f.len()
            ));
        };
        if sass.len() != 64 || !sass.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "kernels/proven.tsv line {}: `{sass}` is not a SHA-256",
                n + 1
            ));
        }
        out.push(Record {
            entry,
            arch,
            sass,
            card,
            date,
            kit,
            run,
        });
    }
    Ok(out)
}

/// The embedded records (none, with one warning, if the file does not parse; a test
/// keeps it parseable).
pub fn records() -> &'static [Record] {
    static RECORDS: OnceLock<Vec<Record>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        parse(PROVEN_TSV).unwrap_or_else(|e| {
            log::warn!("{e}: no kernel counts as run on hardware");
            Vec::new()
        })
    })
}

/// The SHA-256 of `entry`'s machine code for `arch` in this binary.
pub fn shipped_sass(entry: &str, arch: &str) -> Option<&'static str> {
    kernels::KERNEL_SASS
        .iter()
        .find(|(e, a, _)| *e == entry && *a == arch)
        .map(|(_, _, h)| *h)
}

/// The records proving this binary's `entry` on `arch` (empty: not proven).
pub fn proofs(entry: &str, arch: &str) -> Vec<&'static Record> {
    let Some(sass) = shipped_sass(entry, arch) else {
        return Vec::new();
    };
    records()
        .iter()
        .filter(|r| r.entry == entry && r.arch == arch && r.sass == sass)
        .collect()
}

/// The SASS image of `entry` a device of compute capability `cc` loads: the
/// arch-specific `sm_XYa` of exactly that capability, else the newest `sm_XZ` of the same
/// major with Z ≤ Y; `None` when the driver would JIT the PTX (a card this binary has no
/// SASS for).
pub fn loaded_arch(entry: &str, cc: (i32, i32)) -> Option<&'static str> {
    let archs = kernels::KERNEL_SASS
        .iter()
        .filter(|(e, _, _)| *e == entry)
        .map(|(_, a, _)| *a);
    let exact = format!("sm_{}{}a", cc.0, cc.1);
    let mut best: Option<(i32, &'static str)> = None;
    for arch in archs {
        if arch == exact {
            return Some(arch);
        }
        let Some(num) = arch.strip_prefix("sm_").and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if num / 10 == cc.0 && num % 10 <= cc.1 && best.is_none_or(|(b, _)| num > b) {
            best = Some((num, arch));
        }
    }
    best.map(|(_, a)| a)
}

/// Whether every one of `entries` is proven for compute capability `cc`.
pub fn all_proven<'a>(entries: impl IntoIterator<Item = &'a str>, cc: (i32, i32)) -> bool {
    entries
        .into_iter()
        .all(|e| loaded_arch(e, cc).is_some_and(|arch| !proofs(e, arch).is_empty()))
}

/// The records whose hash no shipped entry has (stale: their kernel changed or went).
pub fn stale_records() -> Vec<&'static Record> {
    records()
        .iter()
        .filter(|r| shipped_sass(r.entry, r.arch) != Some(r.sass))
        .collect()
}

/// What [`markdown_table`] says of one kernel file.
#[derive(Default)]
struct ModuleProof {
    /// (entry, architecture) pairs shipped.
    shipped: usize,
    /// Of them, proven on hardware.
    proven: usize,
    /// "H100 2026-11-26" of each proof, sorted, once each.
    cards: std::collections::BTreeSet<String>,
    /// Pairs not proven, per architecture.
    unproven: BTreeMap<&'static str, usize>,
}

/// [`ModuleProof`] of every kernel file this binary ships.
fn by_module() -> BTreeMap<&'static str, ModuleProof> {
    let mut out: BTreeMap<&'static str, ModuleProof> = BTreeMap::new();
    for &(entry, arch, _) in kernels::KERNEL_SASS {
        let slot = out
            .entry(kernels::module_of(entry).unwrap_or("?"))
            .or_default();
        slot.shipped += 1;
        let proofs = proofs(entry, arch);
        if proofs.is_empty() {
            *slot.unproven.entry(arch).or_default() += 1;
        } else {
            slot.proven += 1;
            slot.cards.extend(
                proofs
                    .iter()
                    .map(|r| format!("{} {}", short_card(r.card), r.date)),
            );
        }
    }
    out
}

/// "H100", "H200" from nvidia-smi's names ("NVIDIA H100 80GB HBM3").
fn short_card(card: &str) -> &str {
    card.trim_start_matches("NVIDIA ")
        .split_whitespace()
        .next()
        .unwrap_or(card)
}

/// The Markdown table of docs/cuda.md's "what has run on hardware": per kernel file, how
/// many of its shipped (entry, architecture) pairs are proven, on which cards, and how
/// many are not, per architecture.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| kernel file | entries × SASS archs | proven on hardware | cards (day) | not run on hardware |\n\
         |---|---|---|---|---|\n",
    );
    let or_dash = |v: Vec<String>| {
        if v.is_empty() {
            "—".to_string()
        } else {
            v.join(", ")
        }
    };
    for (module, m) in by_module() {
        let unproven = m
            .unproven
            .iter()
            .map(|(a, n)| format!("{n} on {a}"))
            .collect();
        s.push_str(&format!(
            "| `{module}` | {} | {} | {} | {} |\n",
            m.shipped,
            m.proven,
            or_dash(m.cards.into_iter().collect()),
            or_dash(unproven)
        ));
    }
    s
}

/// The README's one line: how many shipped (entry, architecture) pairs are proven, and on
/// which cards.
pub fn summary_line() -> String {
    let total = kernels::KERNEL_SASS.len();
    let proven = kernels::KERNEL_SASS
        .iter()
        .filter(|(e, a, _)| !proofs(e, a).is_empty())
        .count();
    let mut cards: Vec<&str> = records().iter().map(|r| short_card(r.card)).collect();
    cards.sort();
    cards.dedup();
    format!(
        "{proven} of the {total} kernel entries × SASS architectures this build ships have \
         passed parity on hardware ({}); the rest have run on the emulator only \
         (`--gpu-kernels proven`, the default, runs only proven kernels where a proven \
         alternative exists)",
        cards.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped kernels, or `None` in a build without nvcc (which
    /// `HOPSCORE_REQUIRE_NVCC=1` forbids).
    fn built() -> bool {
        let built = !kernels::KERNEL_SASS.is_empty();
        assert!(
            built || option_env!("HOPSCORE_REQUIRE_NVCC") != Some("1"),
            "built without kernels under HOPSCORE_REQUIRE_NVCC=1"
        );
        built
    }

    #[test]
    fn the_records_parse_and_each_names_a_shipped_entry_as_built() {
        let records = parse(PROVEN_TSV).unwrap();
        assert!(records.len() >= 100, "{} records", records.len());
        if !built() {
            return;
        }
        let stale: Vec<String> = stale_records()
            .iter()
            .map(|r| format!("{} {} ({} {})", r.entry, r.arch, r.card, r.kit))
            .collect();
        assert!(
            stale.is_empty(),
            "kernels/proven.tsv records machine code this build does not ship (the kernel \
             changed: remove the row, a hardware run adds the new one): {stale:?}"
        );
    }

    #[test]
    fn a_bad_row_is_named() {
        let e = parse("# c\na\tsm_90\tabc\n").unwrap_err();
        assert!(e.contains("line 2: 3 fields, expected 7"), "{e}");
        let e = parse("a\tsm_90\tnothex\tc\td\tk\tr\n").unwrap_err();
        assert!(e.contains("`nothex` is not a SHA-256"), "{e}");
    }

    #[test]
    fn the_loaded_image_follows_the_drivers_rule() {
        if !built() {
            return;
        }
        assert_eq!(loaded_arch("add_f32", (9, 0)), Some("sm_90"));
        assert_eq!(loaded_arch("add_f32", (8, 9)), Some("sm_80"));
        assert_eq!(loaded_arch("add_f32", (10, 0)), None);
        assert_eq!(
            loaded_arch("disentangled_attention_v5_bf16", (9, 0)),
            Some("sm_90a")
        );
        assert_eq!(loaded_arch("disentangled_attention_v5_bf16", (8, 0)), None);
        // Proven on the 2026-11-26 cards (unchanged since); never on sm_80.
        assert!(all_proven(["layer_norm_bf16", "add_bf16"], (9, 0)));
        assert!(!all_proven(["layer_norm_bf16"], (8, 0)));
        assert!(!all_proven(["layer_norm_rows4_bf16"], (9, 0)));
    }

    /// docs/cuda.md's table and the README's line are [`markdown_table`] and
    /// [`summary_line`] (`HOPSCORE_BLESS=1` rewrites them).
    #[test]
    fn the_docs_say_what_the_records_say() {
        if !built() {
            return;
        }
        let root = env!("CARGO_MANIFEST_DIR");
        for (file, text) in [
            ("docs/cuda.md", markdown_table()),
            ("README.md", summary_line() + "\n"),
        ] {
            let path = format!("{root}/{file}");
            let doc = std::fs::read_to_string(&path).unwrap();
            let (begin, end) = ("<!-- proven:begin -->\n", "<!-- proven:end -->");
            let start = doc
                .find(begin)
                .unwrap_or_else(|| panic!("{file}: no {begin}"))
                + begin.len();
            let stop = doc[start..]
                .find(end)
                .unwrap_or_else(|| panic!("{file}: no {end}"))
                + start;
            if doc[start..stop] == text {
                continue;
            }
            if std::env::var("HOPSCORE_BLESS").is_ok_and(|v| v == "1") {
                std::fs::write(&path, format!("{}{text}{}", &doc[..start], &doc[stop..])).unwrap();
            } else {
                panic!(
                    "{file} between the proven markers is not what kernels/proven.tsv says; \
                     rerun with HOPSCORE_BLESS=1 to write it:\n{text}"
                );
            }
        }
    }
}
