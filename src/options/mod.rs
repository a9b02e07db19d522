//! The options of a job: its config type is both the command line's flag set (with the
//! `cli` feature each config derives `clap::Args`, every default read from
//! [`Options::defaults`], every value checked by a parser of [`values`]) and, by name,
//! Python's keyword arguments: a config serialises to a JSON object of its options,
//! the given options replace theirs by name, and the object deserialises back and is
//! checked ([`Options::check`], which every job's constructor also runs). An unknown
//! name or a value of the wrong type is refused naming the option.

pub mod values;

use std::path::{Path, PathBuf};

use crate::io::paths::Named;
use crate::model::hub::Need;

use anyhow::{anyhow, bail, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

/// Options by name: a JSON object.
pub type OptionMap = Map<String, Value>;

/// A config with a default for every option and the checks of their values.
pub trait Options: Sized {
    /// Every option at its default; required paths are left empty for the caller.
    fn defaults() -> Self;
    /// Refuses a value no run can use (a zero budget, a NaN temperature), naming the
    /// option.
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// The model and tokenizer paths, each of which may be a hub id
    /// ([`resolve_models`]), with what each names.
    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        Vec::new()
    }
    /// The files a run reads besides its input (model, tokenizer, corpus, …), each
    /// named by its flag: no output may be or hold one, and a run's fingerprint holds
    /// their contents.
    fn inputs(&self) -> Vec<Named> {
        Vec::new()
    }
}

/// The paths given among `paths` (`(flag, path)`, `None` when not given), for
/// [`Options::inputs`].
pub fn named(paths: &[(&str, Option<&Path>)]) -> Vec<Named> {
    paths
        .iter()
        .filter_map(|&(flag, path)| path.map(|p| Named::new(flag, p)))
        .collect()
}

/// A model path and an optional tokenizer path, as [`Options::model_paths`] lists them.
pub fn model_and_tokenizer<'a>(
    model: impl IntoIterator<Item = &'a mut PathBuf>,
    tokenizer: Option<&'a mut PathBuf>,
) -> Vec<(&'a mut PathBuf, Need)> {
    let models = model.into_iter().map(|m| (m, Need::Model));
    models
        .chain(tokenizer.map(|t| (t, Need::Tokenizer)))
        .collect()
}

/// Replaces every hub id among a config's model and tokenizer `paths`
/// ([`Options::model_paths`]) by its local snapshot ([`crate::model::hub::local_path`]:
/// a local path that exists stays).
pub fn resolve_models(paths: Vec<(&mut PathBuf, Need)>) -> Result<()> {
    for (path, need) in paths {
        *path = crate::model::hub::local_path(path, need)?;
    }
    Ok(())
}

/// Every option of `config` as run metadata entries (`name`, value; the caller adds the
/// `hopscore.` prefix), from its serde form, so that no option is left out of a run's
/// record: each value as its flag takes it (a string as it is, a number as written, a
/// list joined by commas; an option not given is empty), nested objects flattened.
/// `resolved` holds what the job settled at load (a model's maximum length, the
/// tokenizer's hash, the strategy): each replaces the option of its name, or follows.
pub fn record<C: Serialize>(
    config: &C,
    resolved: &[(&str, String)],
) -> Result<Vec<(String, String)>> {
    let Value::Object(fields) = serde_json::to_value(config)? else {
        bail!("the options of a job are not a JSON object (a hopscore bug: please report it)");
    };
    let mut entries = Vec::new();
    flatten_options(&fields, &mut entries);
    for (name, value) in resolved {
        match entries.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value.clone(),
            None => entries.push((name.to_string(), value.clone())),
        }
    }
    Ok(entries)
}

fn flatten_options(fields: &Map<String, Value>, entries: &mut Vec<(String, String)>) {
    for (name, value) in fields {
        match value {
            Value::Object(inner) => flatten_options(inner, entries),
            value => entries.push((name.clone(), flag_value(value))),
        }
    }
}

/// An option's value as its flag takes it. A float that an `f32` holds exactly is
/// written as that `f32` (`0.1`, not `0.10000000149011612`), whole floats without `.0`.
fn flag_value(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        // A list of lists (`--demo-ids 0,1 --demo-ids 2,3`) as JSON: `[[0,1],[2,3]]`.
        Value::Array(items) if items.iter().any(|i| i.is_array() || i.is_object()) => {
            value.to_string()
        }
        Value::Array(items) => items.iter().map(flag_value).collect::<Vec<_>>().join(","),
        Value::Number(n) if n.is_f64() => {
            let v = n.as_f64().unwrap_or(f64::NAN);
            match f64::from(v as f32) == v {
                true => (v as f32).to_string(),
                false => v.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// Refuses `value` < 1 for `option` (named as the flag and as the field).
pub fn at_least_one(option: &str, value: usize) -> Result<()> {
    if value < 1 {
        bail!("{} must be at least 1, got {value}", flag_and_field(option));
    }
    Ok(())
}

/// The longest wait any option or variable takes, in seconds (a day): a request
/// timeout, a backoff, a progress interval. Past about 1.8e19 s a duration overflows.
pub const MAX_WAIT_SECS: f64 = 86_400.0;

/// Refuses `value` > `max` for `option`; `why` says what the bound guards.
pub fn at_most<T: PartialOrd + std::fmt::Display + Copy>(
    option: &str,
    value: T,
    max: T,
    why: &str,
) -> Result<()> {
    if value > max {
        bail!(
            "{} must be at most {max} ({why}), got {value}",
            flag_and_field(option)
        );
    }
    Ok(())
}

/// Refuses a wait of `option` that is negative, not finite (or ≤ 0 when `positive`), or
/// longer than [`MAX_WAIT_SECS`].
pub fn wait_secs(option: &str, value: f64, positive: bool) -> Result<()> {
    match positive {
        true => finite(option, value, true)?,
        false => non_negative(option, value)?,
    }
    at_most(option, value, MAX_WAIT_SECS, "a day, in seconds")
}

/// Refuses each of `fields` that `config` sets to other than its default while `mode`
/// (`--scorer bm25`) leaves it unused, naming the option and `needs`, the mode it
/// applies to: a flag that does nothing is an error, not dropped without a word.
/// Values compare in the config's serde form, as Python and the command line set them.
pub fn unused_in_mode<C: Options + Serialize>(
    config: &C,
    mode: &str,
    needs: &str,
    fields: &[&str],
) -> Result<()> {
    let (set, default) = (
        serde_json::to_value(config)?,
        serde_json::to_value(C::defaults())?,
    );
    if let Some(field) = fields.iter().find(|f| default.get(**f).is_none()) {
        bail!("`{field}` is not an option of this job (a hopscore bug: please report it)");
    }
    if let Some(field) = fields.iter().find(|f| set.get(**f) != default.get(**f)) {
        bail!(
            "{} does not apply with {mode}: it is read with {needs} only; drop it, or give {needs}",
            flag_and_field(field)
        );
    }
    Ok(())
}

/// Refuses a `Some(0)` for `option`.
pub fn none_or_at_least_one(option: &str, value: Option<usize>) -> Result<()> {
    value.map_or(Ok(()), |v| at_least_one(option, v))
}

/// Refuses a NaN or infinite `value` for `option`, and one ≤ 0 when `positive`.
pub fn finite<T: Into<f64> + Copy + std::fmt::Display>(
    option: &str,
    value: T,
    positive: bool,
) -> Result<()> {
    let v: f64 = value.into();
    if !v.is_finite() || (positive && v <= 0.0) {
        let what = if positive {
            "a positive number"
        } else {
            "a finite number"
        };
        bail!("{} must be {what}, got {value}", flag_and_field(option));
    }
    Ok(())
}

/// Refuses a NaN, infinite or negative `value` for `option` (a wait, a sampling
/// temperature where 0 is greedy).
pub fn non_negative<T: Into<f64> + Copy + std::fmt::Display>(option: &str, value: T) -> Result<()> {
    finite(option, value, false)?;
    if value.into() < 0.0 {
        bail!(
            "{} must not be negative, got {value}",
            flag_and_field(option)
        );
    }
    Ok(())
}

/// `--beam-size (beam_size)`: how the command line and Python name an option.
fn flag_and_field(option: &str) -> String {
    format!("--{} ({option})", option.replace('_', "-"))
}

/// `C`'s defaults with `options` set by name, checked; `what` names the job in errors.
/// Every name in `required` must be given.
pub fn with_options<C: Options + Serialize + DeserializeOwned>(
    options: &Map<String, Value>,
    required: &[&str],
    what: &str,
) -> Result<C> {
    let Value::Object(mut fields) = serde_json::to_value(C::defaults())? else {
        bail!("the options of {what} are not a JSON object");
    };
    if let Some(missing) = required.iter().find(|r| !options.contains_key(**r)) {
        bail!("{what} needs the option `{missing}`");
    }
    for (name, value) in options {
        let Some(slot) = fields.get_mut(name) else {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            bail!(
                "`{name}` is not an option of {what}; its options are {}",
                known.join(", ")
            );
        };
        *slot = value.clone();
        // Each option as it comes, so a bad value is refused under its own name.
        serde_json::from_value::<C>(Value::Object(fields.clone()))
            .map_err(|e| anyhow!("option `{name}` of {what}: {e}"))?;
    }
    let config: C = serde_json::from_value(Value::Object(fields))?;
    config.check()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::beam::{BeamConfig, Hops};

    fn options(json: Value) -> Map<String, Value> {
        match json {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn options_set_fields_by_name_and_keep_the_other_defaults() {
        let c: BeamConfig = with_options(
            &options(serde_json::json!({"model": "m", "hops": 3, "max_active": 8})),
            &["model"],
            "beam",
        )
        .unwrap();
        assert_eq!(c.model.to_str(), Some("m"));
        assert_eq!(c.hops, Hops::Fixed(3));
        assert_eq!(c.scheduler.max_active, 8);
        assert_eq!(c.beam_size, BeamConfig::defaults().beam_size);
        let auto: BeamConfig =
            with_options(&options(serde_json::json!({"hops": "auto"})), &[], "beam").unwrap();
        assert_eq!(auto.hops, Hops::Auto);
    }

    #[test]
    fn a_record_names_every_option_as_its_flag_takes_it() {
        let mut config = BeamConfig::defaults();
        config.model = "weights/beam".into();
        config.tau = 0.1;
        config.hops = Hops::Fixed(3);
        let entries = record(&config, &[("strategy", "beam".into())]).unwrap();
        let get = |name: &str| {
            entries
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let Value::Object(fields) = serde_json::to_value(&config).unwrap() else {
            unreachable!()
        };
        for name in fields.keys() {
            assert!(get(name).is_some(), "{name} is not recorded: {entries:?}");
        }
        // The scheduler's options are flattened; hops reads as its flag does.
        assert_eq!(get("max_active"), Some("64"));
        assert_eq!(get("hops"), Some("3"));
        assert_eq!(get("tau"), Some("0.1"));
        assert_eq!(get("model"), Some("weights/beam"));
        assert_eq!(get("tokenizer"), Some(""));
        assert_eq!(get("strategy"), Some("beam"));
        let resolved = record(&config, &[("tau", "0.5".into())]).unwrap();
        assert_eq!(
            resolved.len(),
            entries.len() - 1,
            "a resolved value replaces its option"
        );
        assert_eq!(flag_value(&serde_json::json!([2, 10])), "2,10");
        assert_eq!(flag_value(&serde_json::json!([[0, 1], [2]])), "[[0,1],[2]]");
        assert_eq!(flag_value(&serde_json::json!(1.0)), "1");
        assert_eq!(flag_value(&serde_json::json!(0.1)), "0.1");
        assert_eq!(flag_value(&serde_json::json!(true)), "true");
    }

    #[test]
    fn unknown_names_bad_values_and_missing_options_are_named() {
        let err = |json: Value, required: &[&str]| {
            with_options::<BeamConfig>(&options(json), required, "beam")
                .unwrap_err()
                .to_string()
        };
        let unknown = err(serde_json::json!({"beam_width": 2}), &[]);
        assert!(
            unknown.contains("`beam_width` is not an option of beam")
                && unknown.contains("beam_size"),
            "{unknown}"
        );
        let bad = err(serde_json::json!({"beam_size": "two"}), &[]);
        assert!(bad.contains("option `beam_size` of beam"), "{bad}");
        let hops = err(serde_json::json!({"hops": 0}), &[]);
        assert!(
            hops.contains("option `hops`") && hops.contains("from-data"),
            "{hops}"
        );
        assert!(err(serde_json::json!({}), &["model"]).contains("needs the option `model`"));
        let zero = err(serde_json::json!({"beam_size": 0}), &[]);
        assert!(
            zero.contains("--beam-size (beam_size) must be at least 1"),
            "{zero}"
        );
        let nan = err(serde_json::json!({"tau": "NaN"}), &[]);
        assert!(nan.contains("option `tau`"), "{nan}");
    }
}
