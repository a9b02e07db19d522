//! Which implementation of each GPU op a CUDA backend runs: the device flags
//! `--gpu-kernels proven|latest`, `--attention`, `--fused-gelu`, `--fused-gate`,
//! `--fused-norm` ([`GpuSettings`]) resolved for one card and dtype into a [`Plan`].
//!
//! An op with more than one implementation lists them newest first ([`candidates`]),
//! each with the kernel entries it launches. `proven` (the default) takes, per op, the
//! newest whose every entry has a hardware record for the card's SASS
//! ([`super::provenance`]); where none has, the most conservative one (the last: the
//! unfused path) that passed this card's self-test, or that is unproven where no
//! self-test ran. `latest` takes the newest. A switch set to `on` or `off` overrides
//! both. An implementation the self-test failed (`jobs::selftest`) gives way to the
//! next one that passed, and the plan says why ([`Proof::Fallback`]). The plan is logged once and written into
//! each output's metadata (`hopscore.gpu_kernels`), so two runs with different kernels
//! never look the same. std and the provenance table only: no CUDA needed to test it.

use super::dtype::DType;
use super::provenance;

/// `--gpu-kernels`: the implementations a CUDA job may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum KernelSet {
    /// Per op, the newest implementation whose exact machine code has passed parity on
    /// real hardware for this card (kernels/proven.tsv).
    #[default]
    Proven,
    /// The newest implementation of every op, proven or not.
    Latest,
}

/// A switch of one fused kernel: `auto` leaves it to `--gpu-kernels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Switch {
    #[default]
    Auto,
    On,
    Off,
}

/// `--attention`: the bf16/f16 DeBERTa attention kernel. `auto` is v3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Attention {
    #[default]
    Auto,
    /// mma.sync, any GPU from sm_80 (the default).
    V3,
    /// wgmma with TMA loads and warp specialisation, compute capability 9.0, head size 64.
    V5,
}

/// The GPU flags of a job (the [`DeviceConfig`](crate::jobs::DeviceConfig) fields of
/// the same names), handed to the backend when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSettings {
    pub kernels: KernelSet,
    pub attention: Attention,
    pub fused_gelu: Switch,
    pub fused_gate: Switch,
    pub fused_norm: Switch,
}

impl GpuSettings {
    /// What a job gets without flags.
    pub const DEFAULT: GpuSettings = GpuSettings {
        kernels: KernelSet::Proven,
        attention: Attention::Auto,
        fused_gelu: Switch::Auto,
        fused_gate: Switch::Auto,
        fused_norm: Switch::Auto,
    };

    /// Every newest implementation (what the parity tests hold to the CPU twins).
    pub const LATEST: GpuSettings = GpuSettings {
        kernels: KernelSet::Latest,
        ..Self::DEFAULT
    };
}

/// Why an implementation runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Every entry it launches has a hardware record for this card's SASS (the cards).
    Hardware(String),
    /// No hardware record, but it passed this card's self-test.
    SelfTest,
    /// Some entry has no hardware record and no self-test ran: the emulator only.
    Unproven,
    /// A switch asked for it.
    Asked,
    /// The implementation that should have run failed the self-test (what it found).
    Fallback(String),
}

impl std::fmt::Display for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proof::Hardware(cards) => write!(f, "hardware ({cards})"),
            Proof::SelfTest => f.write_str("self-test"),
            Proof::Unproven => f.write_str("unproven (emulator only)"),
            Proof::Asked => f.write_str("asked for"),
            Proof::Fallback(why) => write!(f, "fallback: {why}"),
        }
    }
}

/// What the self-test found for one implementation of an op (`jobs::selftest` runs it
/// in a child process).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// [`Op::name`].
    pub op: String,
    pub implementation: String,
    pub outcome: Outcome,
    /// The case's relative error against the CPU twin, where it finished.
    pub max_err: Option<f32>,
    /// What went wrong, in words ("" for a pass).
    pub detail: String,
}

/// How a self-test case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Within the parity bound of its dtype.
    Pass,
    /// Finished, outside the bound.
    Fail,
    /// Did not finish within the timeout (the child was killed).
    Hang,
    /// The child failed (a launch or driver error, a crash).
    Error,
}

impl Verdict {
    /// "hang (the case did not finish in 20 s)", "fail (rel err 3.1e-1 > 1.0e-2)".
    pub fn summary(&self) -> String {
        let outcome = serde_json::to_value(self.outcome)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        match (self.detail.is_empty(), self.max_err) {
            (true, Some(e)) => format!("{outcome} (rel err {e:.1e})"),
            (true, None) => outcome,
            (false, _) => format!("{outcome} ({})", self.detail),
        }
    }
}

/// One implementation of an op: its name and the entries it launches in a dtype.
struct Candidate {
    name: &'static str,
    entries: fn(&str) -> Vec<String>,
}

/// The op's kernel entries in dtype suffix `dt`: each of `names` as `<name>_<dt>`.
fn typed(names: &[&str], dt: &str) -> Vec<String> {
    names.iter().map(|n| format!("{n}_{dt}")).collect()
}

/// The implementations of each op, newest first. The fused GEMMs run on bf16/f16 on
/// compute capability 9.0 only: elsewhere the unfused path is the one implementation.
fn candidates(op: Op, cc: (i32, i32), dtype: DType) -> Option<Vec<Candidate>> {
    let hopper_16 = cc == (9, 0) && dtype != DType::F32;
    let c = |name, entries| Candidate { name, entries };
    let fused = |fused: Candidate, unfused: Candidate| {
        if hopper_16 {
            vec![fused, unfused]
        } else {
            vec![unfused]
        }
    };
    Some(match op {
        Op::LayerNorm => vec![
            c("rows", |dt| {
                typed(
                    &[
                        "layer_norm_rows2",
                        "layer_norm_rows4",
                        "layer_norm_rows8",
                        "layer_norm",
                    ],
                    dt,
                )
            }),
            c("block", |dt| typed(&["layer_norm"], dt)),
        ],
        Op::RmsNorm => vec![
            c("rows", |dt| {
                typed(
                    &[
                        "rms_norm_rows2",
                        "rms_norm_rows4",
                        "rms_norm_rows8",
                        "rms_norm",
                    ],
                    dt,
                )
            }),
            c("block", |dt| typed(&["rms_norm"], dt)),
        ],
        Op::Rope => vec![
            c("v2", |dt| typed(&["rope"], dt)),
            c("v1", |dt| typed(&["rope_v1"], dt)),
        ],
        Op::GemmBiasGelu => fused(
            c("fused", |dt| typed(&["gemm_bias_gelu"], dt)),
            c("unfused", |dt| typed(&["gelu"], dt)),
        ),
        Op::GemmGated => fused(
            c("fused", |dt| {
                typed(&["gemm_gated_silu", "gemm_gated_gelu_new"], dt)
            }),
            c("unfused", |dt| typed(&["gated_silu", "gated_gelu_new"], dt)),
        ),
        // The unfused pass is the layer_norm op's own choice.
        Op::GemmAddNorm => fused(
            c("fused", |dt| {
                typed(&["gemm_add_norm_1024", "gemm_add_norm_768"], dt)
            }),
            c("unfused", |dt| typed(&["layer_norm"], dt)),
        ),
    })
}

/// The ops whose implementation a [`Plan`] chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    LayerNorm,
    RmsNorm,
    Rope,
    GemmBiasGelu,
    GemmGated,
    GemmAddNorm,
}

impl Op {
    /// Every op, in the order plans list them.
    pub const ALL: [Op; 6] = [
        Op::LayerNorm,
        Op::RmsNorm,
        Op::Rope,
        Op::GemmBiasGelu,
        Op::GemmGated,
        Op::GemmAddNorm,
    ];

    /// Its name in logs and metadata.
    pub fn name(self) -> &'static str {
        match self {
            Op::LayerNorm => "layer_norm",
            Op::RmsNorm => "rms_norm",
            Op::Rope => "rope",
            Op::GemmBiasGelu => "gemm_bias_gelu",
            Op::GemmGated => "gemm_gated",
            Op::GemmAddNorm => "gemm_add_norm",
        }
    }

    /// The flag that switches it, if one does.
    fn switch(self, s: &GpuSettings) -> Switch {
        match self {
            Op::GemmBiasGelu => s.fused_gelu,
            Op::GemmGated => s.fused_gate,
            Op::GemmAddNorm => s.fused_norm,
            Op::LayerNorm | Op::RmsNorm | Op::Rope => Switch::Auto,
        }
    }
}

/// What runs for one op, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub op: Op,
    pub implementation: &'static str,
    pub proof: Proof,
}

/// The implementations a backend runs on one card in one dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub choices: Vec<Choice>,
    /// The DeBERTa attention kernel asked for ([`Attention::Auto`] resolved to v3).
    pub attention: Attention,
}

impl Plan {
    /// The plan for compute capability `cc` and `dtype` under `settings`, with the
    /// self-test's `verdicts` for this card (none: it did not run).
    pub fn new(
        settings: &GpuSettings,
        cc: (i32, i32),
        dtype: DType,
        verdicts: &[Verdict],
    ) -> Result<Plan, String> {
        let choices = Op::ALL
            .into_iter()
            .filter_map(|op| choose(op, settings, cc, dtype, verdicts).transpose())
            .collect::<Result<_, _>>()?;
        let attention = match settings.attention {
            Attention::Auto => Attention::V3,
            a => a,
        };
        Ok(Plan { choices, attention })
    }

    /// Every (op, implementation) the self-test runs on compute capability `cc` in
    /// `dtype`: each implementation of each op that has more than one, so that a
    /// fallback is tested as well as what it replaces.
    pub fn cases(cc: (i32, i32), dtype: DType) -> Vec<(Op, &'static str)> {
        Op::ALL
            .into_iter()
            .flat_map(|op| {
                candidates(op, cc, dtype)
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |c| (op, c.name))
            })
            .collect()
    }

    /// The op and implementation of `"op:implementation"`, among [`Plan::cases`]' names.
    pub fn parse_case(text: &str) -> Option<(Op, &'static str)> {
        let (op, name) = text.split_once(':')?;
        let op = Op::ALL.into_iter().find(|o| o.name() == op)?;
        [(9, 0), (8, 0)].into_iter().find_map(|cc| {
            candidates(op, cc, DType::Bf16)?
                .into_iter()
                .find(|c| c.name == name)
                .map(|c| (op, c.name))
        })
    }

    /// The fallbacks a self-test caused, one line each ("gemm_bias_gelu: unfused runs:
    /// fused …").
    pub fn fallbacks(&self) -> Vec<String> {
        self.choices
            .iter()
            .filter_map(|c| match &c.proof {
                Proof::Fallback(why) => Some(format!(
                    "{}: {} runs instead ({why})",
                    c.op.name(),
                    c.implementation
                )),
                _ => None,
            })
            .collect()
    }

    /// The implementation chosen for `op` (`None`: it does not apply here).
    pub fn implementation(&self, op: Op) -> Option<&'static str> {
        self.choices
            .iter()
            .find(|c| c.op == op)
            .map(|c| c.implementation)
    }

    /// Whether `op` runs its implementation `name`.
    pub fn runs(&self, op: Op, name: &str) -> bool {
        self.implementation(op) == Some(name)
    }

    /// The choices that run unproven code, as "rope v2" items.
    pub fn unproven(&self) -> Vec<String> {
        self.choices
            .iter()
            .filter(|c| c.proof == Proof::Unproven)
            .map(|c| format!("{} {}", c.op.name(), c.implementation))
            .collect()
    }

    /// The metadata value of `hopscore.gpu_kernels`: `{"op": "implementation: proof", …}`
    /// with the attention kernel, as JSON.
    pub fn describe(&self) -> String {
        let mut map = serde_json::Map::new();
        for c in &self.choices {
            map.insert(
                c.op.name().to_string(),
                format!("{}: {}", c.implementation, c.proof).into(),
            );
        }
        let attention = serde_json::to_value(self.attention).unwrap_or_default();
        map.insert("disentangled_attention".into(), attention);
        serde_json::Value::Object(map).to_string()
    }
}

/// The choice for `op`: a switch's, else the settings' kernel set's; one the self-test
/// failed gives way to the next implementation that passed. An error when none passed.
fn choose(
    op: Op,
    settings: &GpuSettings,
    cc: (i32, i32),
    dtype: DType,
    verdicts: &[Verdict],
) -> Result<Option<Choice>, String> {
    let Some(list) = candidates(op, cc, dtype) else {
        return Ok(None);
    };
    let dt = dtype.suffix();
    let verdict = |c: &Candidate| {
        verdicts
            .iter()
            .find(|v| v.op == op.name() && v.implementation == c.name)
    };
    let passed = |c: &Candidate| verdict(c).is_none_or(|v| v.outcome == Outcome::Pass);
    let proof = |c: &Candidate| {
        let entries = (c.entries)(dt);
        if !provenance::all_proven(entries.iter().map(String::as_str), cc) {
            return match verdict(c) {
                Some(_) => Proof::SelfTest,
                None => Proof::Unproven,
            };
        }
        let mut cards: Vec<String> = entries
            .iter()
            .filter_map(|e| provenance::loaded_arch(e, cc).map(|a| provenance::proofs(e, a)))
            .flatten()
            .map(|r| r.card.trim_start_matches("NVIDIA ").to_string())
            .collect();
        cards.sort();
        cards.dedup();
        Proof::Hardware(cards.join(", "))
    };
    let last = list.len() - 1;
    let wanted = match (op.switch(settings), settings.kernels) {
        (Switch::On, _) | (Switch::Auto, KernelSet::Latest) => 0,
        (Switch::Off, _) => last,
        (Switch::Auto, KernelSet::Proven) => list
            .iter()
            .position(|c| matches!(proof(c), Proof::Hardware(_)) && passed(c))
            // No version has run on hardware: the most conservative that passed the
            // self-test (where it ran), else the most conservative.
            .or_else(|| list.iter().rposition(passed))
            .unwrap_or(last),
    };
    let asked = op.switch(settings) != Switch::Auto && list.len() > 1;
    let pick = |i: usize, proof: Proof| Choice {
        op,
        implementation: list[i].name,
        proof,
    };
    if passed(&list[wanted]) {
        let p = if asked {
            Proof::Asked
        } else {
            proof(&list[wanted])
        };
        return Ok(Some(pick(wanted, p)));
    }
    let failed = verdict(&list[wanted])
        .map(Verdict::summary)
        .unwrap_or_default();
    let why = format!("{} {failed} in the self-test", list[wanted].name);
    match (0..list.len())
        .filter(|&i| i != wanted)
        .find(|&i| passed(&list[i]))
    {
        Some(i) => Ok(Some(pick(i, Proof::Fallback(why)))),
        None => Err(format!(
            "no implementation of {} passed the GPU self-test on this card ({}): use \
             --device cpu",
            op.name(),
            list.iter()
                .map(|c| format!(
                    "{} {}",
                    c.name,
                    verdict(c).map(Verdict::summary).unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built() -> bool {
        !crate::backend::kernels::KERNEL_SASS.is_empty()
    }

    fn plan(settings: &GpuSettings, cc: (i32, i32), dtype: DType, verdicts: &[Verdict]) -> Plan {
        Plan::new(settings, cc, dtype, verdicts).unwrap()
    }

    fn verdict(op: Op, implementation: &str, outcome: Outcome) -> Verdict {
        Verdict {
            op: op.name().into(),
            implementation: implementation.into(),
            outcome,
            max_err: None,
            detail: if outcome == Outcome::Hang {
                "no answer in 20 s".into()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn proven_runs_only_what_ran_on_hardware_on_hopper() {
        if !built() {
            return;
        }
        let plan = plan(&GpuSettings::DEFAULT, (9, 0), DType::Bf16, &[]);
        // The 2026-11-26 kernels: the block norms, rope v1, no CUTLASS GEMM.
        for (op, name) in [
            (Op::LayerNorm, "block"),
            (Op::RmsNorm, "block"),
            (Op::Rope, "v1"),
            (Op::GemmBiasGelu, "unfused"),
            (Op::GemmAddNorm, "unfused"),
        ] {
            let c = plan.choices.iter().find(|c| c.op == op).unwrap();
            assert_eq!(c.implementation, name, "{op:?}");
            assert!(
                matches!(c.proof, Proof::Hardware(ref cards) if cards.contains("H100")),
                "{c:?}"
            );
        }
        // No version of the gated pass has run (it changed since): the unfused one,
        // said to be unproven.
        assert_eq!(plan.unproven(), ["gemm_gated unfused"]);
        assert_eq!(plan.attention, Attention::V3);
    }

    #[test]
    fn latest_runs_the_newest_and_switches_override() {
        if !built() {
            return;
        }
        let latest = plan(&GpuSettings::LATEST, (9, 0), DType::Bf16, &[]);
        assert!(latest.runs(Op::LayerNorm, "rows") && latest.runs(Op::Rope, "v2"));
        assert!(latest.runs(Op::GemmBiasGelu, "fused") && latest.runs(Op::GemmAddNorm, "fused"));
        let off = GpuSettings {
            fused_norm: Switch::Off,
            ..GpuSettings::LATEST
        };
        let p = plan(&off, (9, 0), DType::Bf16, &[]);
        assert!(p.runs(Op::GemmAddNorm, "unfused") && p.runs(Op::GemmBiasGelu, "fused"));
        let on = GpuSettings {
            fused_gelu: Switch::On,
            ..GpuSettings::DEFAULT
        };
        let p = plan(&on, (9, 0), DType::Bf16, &[]);
        assert_eq!(p.implementation(Op::GemmBiasGelu), Some("fused"));
        assert!(
            p.describe()
                .contains(r#""gemm_bias_gelu":"fused: asked for""#),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn a_card_never_seen_runs_the_conservative_path_unless_the_self_test_decides() {
        if !built() {
            return;
        }
        let p = plan(&GpuSettings::DEFAULT, (8, 0), DType::Bf16, &[]);
        // No fused GEMM off Hopper; nothing proven on sm_80.
        assert_eq!(p.implementation(Op::GemmBiasGelu), Some("unfused"));
        assert_eq!(p.unproven().len(), 6, "{:?}", p.unproven());
        assert!(p.runs(Op::LayerNorm, "block") && p.runs(Op::Rope, "v1"));
        // With the self-test's verdicts: still the most conservative, now tested here;
        // one that failed gives way to the next that passed.
        let mut verdicts: Vec<Verdict> = Plan::cases((8, 0), DType::Bf16)
            .into_iter()
            .map(|(op, name)| verdict(op, name, Outcome::Pass))
            .collect();
        let p = plan(&GpuSettings::DEFAULT, (8, 0), DType::Bf16, &verdicts);
        assert!(p.runs(Op::LayerNorm, "block") && p.runs(Op::Rope, "v1"));
        assert!(p.unproven().is_empty() && p.describe().contains(r#""rope":"v1: self-test""#));
        let v1 = verdicts
            .iter()
            .position(|v| v.implementation == "v1")
            .unwrap();
        verdicts[v1].outcome = Outcome::Fail;
        let p = plan(&GpuSettings::DEFAULT, (8, 0), DType::Bf16, &verdicts);
        assert!(p.runs(Op::Rope, "v2"), "{:?}", p.choices);
        assert!(
            p.describe().contains(r#""rope":"v2: self-test""#),
            "{}",
            p.describe()
        );
        let f32_plan = plan(&GpuSettings::DEFAULT, (9, 0), DType::F32, &[]);
        assert_eq!(f32_plan.unproven(), ["gemm_gated unfused"]);
    }

    #[test]
    fn a_failed_self_test_falls_back_and_says_why() {
        if !built() {
            return;
        }
        let mut verdicts: Vec<Verdict> = Plan::cases((9, 0), DType::Bf16)
            .into_iter()
            .map(|(op, name)| verdict(op, name, Outcome::Pass))
            .collect();
        verdicts[Plan::cases((9, 0), DType::Bf16)
            .iter()
            .position(|&c| c == (Op::GemmBiasGelu, "fused"))
            .unwrap()] = verdict(Op::GemmBiasGelu, "fused", Outcome::Hang);
        let p = plan(&GpuSettings::LATEST, (9, 0), DType::Bf16, &verdicts);
        assert!(p.runs(Op::GemmBiasGelu, "unfused") && p.runs(Op::GemmAddNorm, "fused"));
        assert_eq!(
            p.fallbacks(),
            ["gemm_bias_gelu: unfused runs instead (fused hang (no answer in 20 s) in the self-test)"]
        );
        // Asked for, it still gives way.
        let on = GpuSettings {
            fused_gelu: Switch::On,
            ..GpuSettings::DEFAULT
        };
        assert!(plan(&on, (9, 0), DType::Bf16, &verdicts).runs(Op::GemmBiasGelu, "unfused"));
        // Nothing left: an error naming the op and what each did.
        for v in verdicts.iter_mut().filter(|v| v.op == "gemm_bias_gelu") {
            v.outcome = Outcome::Error;
            v.detail = "CUDA_ERROR_LAUNCH_FAILED".into();
        }
        let e = Plan::new(&GpuSettings::LATEST, (9, 0), DType::Bf16, &verdicts).unwrap_err();
        assert!(
            e.contains("no implementation of gemm_bias_gelu passed") && e.contains("--device cpu"),
            "{e}"
        );
        assert_eq!(Plan::parse_case("rope:v1"), Some((Op::Rope, "v1")));
        assert_eq!(
            Plan::parse_case("gemm_add_norm:fused"),
            Some((Op::GemmAddNorm, "fused"))
        );
        assert_eq!(Plan::parse_case("rope:v9"), None);
    }
}
