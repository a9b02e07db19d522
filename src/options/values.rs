//! Value parsers for numeric flags: every count, budget, limit, temperature and wait
//! is checked when the command line is parsed, so that zero, negative, NaN or infinite
//! values are refused with a message that clap prefixes with the flag's name (exit
//! code 2) instead of hanging or misbehaving later.

use std::path::{Path, PathBuf};
use std::str::FromStr;

fn parse<T: FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("`{s}` is not {what}"))
}

/// An integer ≥ 1.
fn positive<T: FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    let v: T = parse(s, "a whole number")?;
    if v < T::from(1) {
        return Err(format!("`{s}`: must be at least 1"));
    }
    Ok(v)
}

/// `on` or `off` (also `true`/`false`, `1`/`0`).
pub fn on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

/// A count or budget that must be at least 1.
pub fn positive_usize(s: &str) -> Result<usize, String> {
    positive(s)
}

/// A count or budget that must be at least 1.
pub fn positive_u64(s: &str) -> Result<u64, String> {
    positive(s)
}

/// A count or budget that must be at least 1.
pub fn positive_u32(s: &str) -> Result<u32, String> {
    positive(s)
}

fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = parse(s, "a number")?;
    if !v.is_finite() {
        return Err(format!("`{s}`: must be a finite number"));
    }
    Ok(v)
}

/// A finite number (any sign), e.g. a score threshold.
pub fn finite_f32(s: &str) -> Result<f32, String> {
    finite(s).map(|v| v as f32)
}

/// A finite number (any sign), e.g. a score threshold.
pub fn finite_f64(s: &str) -> Result<f64, String> {
    finite(s)
}

/// A finite number > 0 (temperatures, timeouts).
pub fn positive_f32(s: &str) -> Result<f32, String> {
    positive_f64(s).map(|v| v as f32)
}

/// A finite number > 0 (temperatures, timeouts).
pub fn positive_f64(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v <= 0.0 {
        return Err(format!("`{s}`: must be greater than 0"));
    }
    Ok(v)
}

/// A finite number ≥ 0 (waits, sampling temperatures where 0 is greedy).
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    non_negative_f64(s).map(|v| v as f32)
}

/// A finite number ≥ 0 (waits, sampling temperatures where 0 is greedy).
pub fn non_negative_f64(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v < 0.0 {
        return Err(format!("`{s}`: must not be negative"));
    }
    Ok(v)
}

/// Positions in a list, such as `0,1`.
pub fn positions(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|i| {
            i.trim()
                .parse()
                .map_err(|_| format!("`{s}`: expected positions such as 0,1"))
        })
        .collect()
}

/// A model, tokenizer or GGUF file (`--model`, `--tokenizer`, `--encoder`, …): a
/// local path (which always wins), or a Hugging
/// Face Hub id (`org/name`, `org/name@revision`, `org/name:file.gguf`). Only the
/// syntax is checked here: a hub id is resolved to its snapshot in the hub cache (and
/// what the cache lacks downloaded) when the run starts ([`crate::model::hub`]), so
/// `--help` or a mistyped flag later on the line never reaches the network.
pub fn model_path(s: &str) -> Result<PathBuf, String> {
    crate::model::hub::check_spec(Path::new(s))
        .map(|()| PathBuf::from(s))
        .map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_negative_and_nan_are_refused() {
        assert_eq!(positive_usize("3"), Ok(3));
        assert!(positive_usize("0").unwrap_err().contains("at least 1"));
        assert!(positive_usize("-1").is_err() && positive_u64("x").is_err());
        assert_eq!(finite_f32("-1"), Ok(-1.0));
        for bad in ["nan", "NaN", "inf", "-inf"] {
            assert!(finite_f32(bad).unwrap_err().contains("finite"), "{bad}");
            assert!(positive_f32(bad).is_err() && non_negative_f64(bad).is_err());
        }
        assert!(positive_f64("0").unwrap_err().contains("greater than 0"));
        assert_eq!(non_negative_f64("0"), Ok(0.0));
        assert!(non_negative_f64("-0.5").unwrap_err().contains("negative"));
    }
}
