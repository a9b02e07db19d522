//! `hopscore classify` end to end: Parquet in → HF-golden logits out, bad rows in the
//! quarantine file, input order kept across token-budget batches; and `inspect`, plus
//! the errors for broken checkpoints.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, Float32Array, ListArray, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use hopscore::backend::cpu::CpuGemm;
use hopscore::cli::job::{run, JobArgs};
use hopscore::jobs::classify::ClassifyConfig;
use hopscore::jobs::DeviceConfig;
use hopscore::pipeline::files::FileRun;
use parquet::arrow::ArrowWriter;
use sha2::{Digest, Sha256};

/// Golden sequences of the v3_seqcls fixture as (text_a, text_b) and their HF logits.
fn golden_pairs() -> (Vec<(String, String)>, Vec<Vec<f32>>) {
    let g = common::read_golden(&common::fixture("deberta/v3_seqcls/golden.safetensors"));
    let ids = &g["input_ids"];
    let l = ids.shape[1];
    let logits = &g["logits.sequence"];
    let n = logits.shape[1];
    let mut pairs = Vec::new();
    let mut gold = Vec::new();
    for r in 0..ids.shape[0] {
        let row = &ids.i64[r * l..(r + 1) * l];
        let len = row.iter().rposition(|&x| x != 0).unwrap() + 1;
        let mid = len / 3; // the fixture's middle [SEP]
        assert_eq!((row[0], row[mid], row[len - 1]), (1, 2, 2));
        let words = |s: &[i64]| {
            s.iter()
                .map(|i| format!("w{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        pairs.push((words(&row[1..mid]), words(&row[mid + 1..len - 1])));
        gold.push(logits.f32[r * n..(r + 1) * n].to_vec());
    }
    (pairs, gold)
}

fn write_input(path: &Path, rows: &[(Option<&str>, Option<String>, Option<String>)]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("text_a", DataType::Utf8, true),
        Field::new("text_b", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.clone()))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2.clone()))),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn classify_matches_hf_logits_and_quarantines_bad_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let (pairs, gold) = golden_pairs();
    let p = |i: usize| (Some(pairs[i].0.clone()), Some(pairs[i].1.clone()));
    let huge = "w5 ".repeat(400_000);
    let rows = vec![
        (Some("a"), p(0).0, p(0).1),
        (Some("b"), None, Some("w5".to_string())),
        (Some("c"), p(1).0, p(1).1),
        (None, Some("w5 w6".to_string()), None),
        (Some("e"), Some("   ".to_string()), None),
        (Some("f"), p(2).0, p(2).1),
        (Some("g"), Some(huge), None),
    ];
    let input = tmp.path().join("pairs.parquet");
    write_input(&input, &rows);
    let output = tmp.path().join("out/scores.parquet");
    let config = ClassifyConfig {
        tokenizer: Some(tokenizer),
        // Smaller than the longest sequence: every sequence becomes its own batch.
        max_batch_tokens: 200,
        ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
    };
    let summary = run(common::job_args(config, &input, &output)).unwrap();
    assert_eq!(common::scored_and_quarantined(&summary), (3, 4));

    let out = common::read_parquet(&output);
    let ids = out
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(ids.iter().flatten().collect::<Vec<_>>(), ["a", "c", "f"]);
    let logits = out.column(1).as_any().downcast_ref::<ListArray>().unwrap();
    for (r, want) in gold.iter().enumerate() {
        let v = logits.value(r);
        let got = v.as_any().downcast_ref::<Float32Array>().unwrap();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.values().iter().zip(want) {
            assert!((a - b).abs() <= 1e-4, "row {r}: {a} vs HF {b}");
        }
    }

    let q = common::read_parquet(&tmp.path().join("out/scores.quarantine.parquet"));
    let rows = q.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
    let reasons = q.column(2).as_any().downcast_ref::<StringArray>().unwrap();
    let got: Vec<(u64, &str)> = rows
        .values()
        .iter()
        .copied()
        .zip(reasons.iter().flatten())
        .collect();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0], (1, "text_a is null"));
    assert_eq!(got[1], (3, "id is null"));
    assert_eq!(got[2], (4, "text_a is empty"));
    assert_eq!(got[3].0, 6);
    assert!(got[3].1.contains("bytes (limit"), "{}", got[3].1);

    // Provenance: the dtype computed in, and the model identified by the content of its
    // weights and config.json (`sha256sum`'s lines of both, hashed).
    let meta = key_values(&output);
    assert_eq!(meta["hopscore.dtype"], "f32");
    let model = common::fixture("deberta/v3_seqcls");
    let line = |name: &str| {
        let bytes = std::fs::read(model.join(name)).unwrap();
        format!("{}  {name}", hex(&Sha256::digest(bytes)))
    };
    let lines = [line("model.safetensors"), line("config.json")].join("\n");
    assert_eq!(meta["hopscore.model_sha256"], hex(&Sha256::digest(lines)));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key-value metadata of a Parquet file.
/// Issue 15: a GPU run records the dtype it computed in (`bf16`, not the CPU's `f32`),
/// and its logits (the fused `cls_head`) stay near HF's. Skipped without a CUDA device
/// (the emulator of tools/cuda_emu is one).
#[cfg(feature = "cuda")]
#[test]
fn cuda_run_records_its_dtype() {
    use hopscore::backend::dtype::DType;
    use hopscore::jobs::DeviceKind;
    if common::gpu(DType::Bf16).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (pairs, gold) = golden_pairs();
    let rows: Vec<_> = pairs
        .iter()
        .map(|(a, b)| (Some("x"), Some(a.clone()), Some(b.clone())))
        .collect();
    let input = tmp.path().join("pairs.parquet");
    write_input(&input, &rows);
    let output = tmp.path().join("scores.parquet");
    let config = ClassifyConfig {
        tokenizer: Some(common::word_tokenizer(tmp.path())),
        max_batch_tokens: 4096,
        ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
    };
    let summary = run(JobArgs {
        device: DeviceConfig {
            kind: DeviceKind::Cuda,
            gpu: 0,
            dtype: DType::Bf16,
            cuda_graphs: true,
            ..DeviceConfig::CPU
        },
        ..common::job_args(config, &input, &output)
    })
    .unwrap();
    assert_eq!(
        common::scored_and_quarantined(&summary).0,
        gold.len() as u64
    );
    let meta = key_values(&output);
    assert_eq!(meta["hopscore.dtype"], "bf16");
    assert!(meta["hopscore.device"].starts_with("cuda:0"), "{meta:?}");
    let out = common::read_parquet(&output);
    let logits = out.column(1).as_any().downcast_ref::<ListArray>().unwrap();
    let scale = gold.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    for (r, want) in gold.iter().enumerate() {
        let v = logits.value(r);
        let got = v.as_any().downcast_ref::<Float32Array>().unwrap();
        for (a, b) in got.values().iter().zip(want) {
            // The whole-model bf16 bound of tests/gpu_parity/models.rs, against HF's f32.
            assert!((a - b).abs() <= 5e-2 * scale, "row {r}: {a} vs HF {b}");
        }
    }
}

/// Issue 38: on the device, a row's logits are the same bits whether the file runs
/// whole in one batch or in 3 shards of batches of at most 320 tokens, graphs off (the
/// emulator's cuBLASLt, like a GPU's, picks another algorithm for other row counts
/// unless the algorithm is pinned, the default). f32, where a last-bit difference
/// cannot round away.
#[cfg(feature = "cuda")]
#[test]
fn cuda_logits_are_the_same_bits_in_shards_and_any_batch_size() {
    use hopscore::backend::dtype::DType;
    use hopscore::io::shard::Shard;
    use hopscore::jobs::DeviceKind;
    if common::gpu(DType::F32).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mut texts, _) = golden_pairs();
    let mut rng = fastrand::Rng::with_seed(38);
    let words = |rng: &mut fastrand::Rng, n: usize| {
        (0..n)
            .map(|_| format!("w{}", rng.u32(3..1000)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for _ in 0..14 {
        let (a, b) = (rng.usize(1..12), rng.usize(1..30));
        texts.push((words(&mut rng, a), words(&mut rng, b)));
    }
    let ids: Vec<String> = (0..texts.len()).map(|i| format!("r{i}")).collect();
    let rows: Vec<_> = texts
        .iter()
        .zip(&ids)
        .map(|((a, b), id)| (Some(id.as_str()), Some(a.clone()), Some(b.clone())))
        .collect();
    let input = tmp.path().join("pairs.parquet");
    write_input(&input, &rows);
    let tokenizer = common::word_tokenizer(tmp.path());
    let device = |cuda_graphs| DeviceConfig {
        kind: DeviceKind::Cuda,
        dtype: DType::F32,
        cuda_graphs,
        ..DeviceConfig::CPU
    };
    // Logits bits by row id, from one output file.
    let logits_of = |path: &Path| -> Vec<(String, Vec<u32>)> {
        let out = common::read_parquet(path);
        let id = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let logits = out.column(1).as_any().downcast_ref::<ListArray>().unwrap();
        (0..out.num_rows())
            .map(|r| {
                let v = logits.value(r);
                let v = v.as_any().downcast_ref::<Float32Array>().unwrap();
                (
                    id.value(r).to_string(),
                    v.values().iter().map(|x| x.to_bits()).collect(),
                )
            })
            .collect()
    };
    let classify = |max_batch_tokens, shard: Option<Shard>, graphs, name: &str| {
        let output = tmp.path().join(name);
        let config = ClassifyConfig {
            tokenizer: Some(tokenizer.clone()),
            max_batch_tokens,
            ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
        };
        let mut args = common::job_args(config, &input, &output);
        args.files.shard = shard;
        args.device = device(graphs);
        run(args).unwrap();
        logits_of(&output)
    };
    let whole = classify(4096, None, true, "whole.parquet");
    assert_eq!(whole.len(), texts.len());
    let sharded: Vec<(String, Vec<u32>)> = (0..3)
        .flat_map(|index| {
            let shard = Some(Shard { index, count: 3 });
            classify(320, shard, false, &format!("shard{index}.parquet"))
        })
        .collect();
    assert_eq!(sharded.len(), whole.len());
    for ((id, got), (want_id, want)) in sharded.iter().zip(&whole) {
        assert_eq!(id, want_id);
        assert!(got == want, "row {id}: logits differ between the runs");
    }
}

fn key_values(path: &Path) -> std::collections::HashMap<String, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let kv = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap();
    kv.iter()
        .map(|e| (e.key.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn wrong_column_type_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("text_a", DataType::Float32, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(Float32Array::from(vec![1.0])),
        ],
    )
    .unwrap();
    let input = tmp.path().join("bad.parquet");
    let mut w = ArrowWriter::try_new(std::fs::File::create(&input).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let config = ClassifyConfig {
        tokenizer: Some(common::word_tokenizer(tmp.path())),
        max_batch_tokens: 1000,
        ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
    };
    let err = run(common::job_args(
        config,
        &input,
        &tmp.path().join("o.parquet"),
    ))
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("column `text_a` has type Float32"),
        "{err:#}"
    );
}

#[test]
fn inspect_reports_heads_params_and_dtype() {
    let report = hopscore::cli::inspect::run(&hopscore::cli::inspect::InspectArgs {
        model: common::fixture("deberta/efficientrag_labeler"),
        tokenizer: None,
    })
    .unwrap();
    assert!(
        report.contains("2 layers, hidden 32, 4 heads × 8"),
        "{report}"
    );
    assert!(
        report.contains("head       sequence  2 labels, Pooler pooling"),
        "{report}"
    );
    assert!(
        report.contains("head       token     2 labels, Tokens pooling"),
        "{report}"
    );
    let f16 = hopscore::cli::inspect::run(&hopscore::cli::inspect::InspectArgs {
        model: common::fixture("deberta/v3_token_f16"),
        tokenizer: None,
    })
    .unwrap();
    assert!(f16.contains("F16"), "{f16}");
}

/// Copies the v3_seqcls checkpoint with one tensor removed or reshaped.
fn broken_checkpoint(dir: &Path, drop: Option<&str>, reshape: Option<&str>) {
    edited_checkpoint(dir, |name, shape, _| {
        if Some(name) == reshape {
            *shape = vec![shape.iter().product()];
        }
        Some(name) != drop
    });
}

/// Copies the v3_seqcls checkpoint (f32 tensors), passing each tensor's name, shape
/// and bytes to `edit`, which may change them and says whether to keep the tensor.
fn edited_checkpoint(dir: &Path, edit: impl Fn(&str, &mut Vec<usize>, &mut Vec<u8>) -> bool) {
    let src = common::fixture("deberta/v3_seqcls");
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut kept: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        let (mut shape, mut data) = (view.shape().to_vec(), view.data().to_vec());
        if edit(&name, &mut shape, &mut data) {
            kept.push((name, shape, data));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = kept
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// The error of loading the cross-encoder in `dir` (which must fail).
fn load_error(dir: &Path) -> String {
    use hopscore::backend::cpu::CpuBackend;
    use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles};
    CrossEncoder::load(&CpuBackend::F32, ModelFiles::open(dir).unwrap(), None)
        .err()
        .map(|e| format!("{e:#}"))
        .expect("loading must fail")
}

#[test]
fn broken_checkpoints_name_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "deberta.encoder.layer.1.attention.self.key_proj.weight";
    broken_checkpoint(tmp.path(), Some(name), None);
    let err = load_error(tmp.path());
    assert!(
        err.contains(&format!("tensor `{name}` is missing")),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let name = "deberta.encoder.layer.0.output.dense.weight";
    broken_checkpoint(tmp.path(), None, Some(name));
    let err = load_error(tmp.path());
    assert!(
        err.contains(&format!("tensor `{name}` has shape [2048]")) && err.contains("[32, 64]"),
        "{err}"
    );
}

/// Issue 26: NaN/Inf weights gave exit 0 with every score NaN, and a config with fewer
/// layers than the checkpoint ignored the extra tensors; both are refused at load,
/// naming the tensors.
#[test]
fn non_finite_weights_and_tensors_the_config_leaves_out_are_refused() {
    let name = "deberta.encoder.layer.1.intermediate.dense.weight";
    for (value, index) in [(f32::NAN, 5), (f32::INFINITY, 0), (f32::NEG_INFINITY, 63)] {
        let tmp = tempfile::tempdir().unwrap();
        edited_checkpoint(tmp.path(), |n, _, data| {
            if n == name {
                data[4 * index..4 * index + 4].copy_from_slice(&value.to_le_bytes());
            }
            true
        });
        let err = load_error(tmp.path());
        let want = format!("tensor `{name}` holds 1 non-finite values (NaN or ±inf; the first at flat index {index})");
        assert!(err.contains(&want), "{err}");
    }
    // config.json says 1 layer; the checkpoint holds 2.
    let tmp = tempfile::tempdir().unwrap();
    edited_checkpoint(tmp.path(), |_, _, _| true);
    let config = tmp.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(json["num_hidden_layers"], 2);
    json["num_hidden_layers"] = 1.into();
    std::fs::write(&config, json.to_string()).unwrap();
    let err = load_error(tmp.path());
    assert!(
        err.contains("tensors of the checkpoint are not part of the model")
            && err.contains("deberta.encoder.layer.1."),
        "{err}"
    );
}

/// A `classify` run of 9 word pairs in parts of 4, in a temporary folder with a word
/// tokenizer, and a file in the way of a quarantine path (to fail a run's final merge,
/// which keeps its committed parts).
struct PartRun {
    tmp: tempfile::TempDir,
    tokenizer: std::path::PathBuf,
    input: std::path::PathBuf,
    blocked: std::path::PathBuf,
}

impl PartRun {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let tokenizer = common::word_tokenizer(tmp.path());
        let input = tmp.path().join("pairs.parquet");
        let rows: Vec<_> = (0..9)
            .map(|i| (Some("a"), Some(format!("w{} w{}", i + 3, i + 9)), None))
            .collect();
        write_input(&input, &rows);
        let blocker = tmp.path().join("blocker");
        std::fs::write(&blocker, b"a file").unwrap();
        Self {
            blocked: blocker.join("q.parquet"),
            tmp,
            tokenizer,
            input,
        }
    }

    fn output(&self) -> std::path::PathBuf {
        self.tmp.path().join("o.parquet")
    }

    /// An f32 run whose parts are committed but whose merge fails (the quarantine path
    /// is blocked), so that a resume has parts to check.
    fn leave_parts(&self) {
        assert!(run(self.args(false, true, CpuGemm::F32)).is_err());
    }

    /// The error of resuming in `cpu_gemm`, which must be refused.
    fn resume_refusal(&self, cpu_gemm: CpuGemm) -> String {
        format!(
            "{:#}",
            run(self.args(true, false, cpu_gemm)).expect_err("refused")
        )
    }

    /// The run's arguments; `fail_merge` points the quarantine into the blocker file.
    fn args(&self, resume: bool, fail_merge: bool, cpu_gemm: CpuGemm) -> JobArgs<ClassifyConfig> {
        let config = ClassifyConfig {
            tokenizer: Some(self.tokenizer.clone()),
            max_batch_tokens: 64,
            ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
        };
        JobArgs {
            config,
            files: FileRun {
                quarantine: fail_merge.then(|| self.blocked.clone()),
                resume,
                part_rows: Some(4),
                ..common::file_args(&self.input, &self.output())
            },
            device: DeviceConfig {
                cpu_gemm,
                ..DeviceConfig::CPU
            },
        }
    }
}

/// Issue 26: `classify --resume` took a changed tokenizer.json and mixed rows of two
/// tokenizers. Every input file is fingerprinted by content; the resume names it.
#[test]
fn resume_refuses_a_changed_tokenizer_naming_it() {
    let job = PartRun::new();
    job.leave_parts();
    // The same tokenizer with one more word: other ids for the same text.
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&job.tokenizer).unwrap()).unwrap();
    tok["model"]["vocab"]["w1000"] = 1000.into();
    std::fs::write(&job.tokenizer, tok.to_string()).unwrap();
    let err = job.resume_refusal(CpuGemm::F32);
    assert!(
        err.contains("other inputs or options") && err.contains("hopscore.sha256.tokenizer"),
        "{err}"
    );
}

/// `--cpu-gemm` is part of a run's identity: the output metadata names it in
/// `hopscore.device`, and a resume with another mode is refused naming that key.
#[test]
fn resume_refuses_another_cpu_gemm_naming_the_device() {
    if !CpuGemm::Bf16.supported() {
        eprintln!("skipped: this CPU has no AVX512-BF16 (bf16 would run as f32)");
        return;
    }
    let job = PartRun::new();
    job.leave_parts();
    let err = job.resume_refusal(CpuGemm::Bf16);
    assert!(
        err.contains("hopscore.device") && err.contains("bf16 dense layers"),
        "{err}"
    );
    // Started over (the unfinished run's parts removed), it records the mode.
    std::fs::remove_dir_all(job.tmp.path().join("o.parquet.parts")).unwrap();
    run(job.args(false, false, CpuGemm::Bf16)).unwrap();
    assert_eq!(
        key_values(&job.output())["hopscore.device"],
        "cpu (bf16 dense layers)"
    );
}

#[test]
fn show_prints_selected_columns_and_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("questions.parquet");
    hopscore::io::importer::import(&hopscore::io::importer::ImportOptions {
        dataset: hopscore::io::questions::Dataset::HotpotQa,
        files: vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo/questions.json")],
        output: file.clone(),
        quarantine: None,
        row_group_rows: 1024,
    })
    .unwrap();
    let show = |columns: &[&str]| {
        hopscore::cli::show::run(&hopscore::cli::show::ShowArgs {
            file: file.clone(),
            rows: 2,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            metadata: false,
        })
    };
    let out = show(&["id"]).unwrap();
    assert!(out.contains("| demo-01"), "{out}");
    assert!(out.contains("2 of 12 rows"), "{out}");
    assert!(!out.contains("question"), "{out}");
    // Issue 26: the columns print in the order asked, not the file's.
    let out = show(&["question", "id"]).unwrap();
    let header = out.lines().find(|l| l.contains("| question")).unwrap();
    assert!(header.find("question") < header.find("| id"), "{header}");
    let err = show(&["nope"]).unwrap_err();
    assert!(err.to_string().contains("no column `nope`"));
}

/// A classify run cut into parts, resumed after a failed finish, or split into
/// shards and merged gives the rows of a whole run (the parts do not change a byte).
#[test]
fn classify_parts_resume_and_shards_keep_the_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let words = |i: usize| format!("w{} w{} w{}", i + 3, i * 7 % 90 + 3, i % 5 + 3);
    let rows: Vec<_> = (0..23)
        .map(|i| {
            let id = (i != 4).then_some(["a", "b", "c"][i % 3]);
            let a = (i != 11).then(|| words(i));
            (id, a, (i % 2 == 0).then(|| words(i + 1)))
        })
        .collect();
    let input = tmp.path().join("pairs.parquet");
    write_input(&input, &rows);
    let config = ClassifyConfig {
        tokenizer: Some(tokenizer.clone()),
        max_batch_tokens: 64,
        ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
    };
    // A run into `<name>.parquet` with the files' flags `files` sets.
    let args = |name: &str, files: &dyn Fn(FileRun) -> FileRun| JobArgs {
        files: files(common::file_args(
            &input,
            &tmp.path().join(format!("{name}.parquet")),
        )),
        ..common::job_args(config.clone(), &input, &input)
    };
    let whole = args("whole", &|f| f);
    assert_eq!(run(whole).unwrap().stats.bad_rows, 2);
    let sevens = |resume| {
        move |f| FileRun {
            resume,
            part_rows: Some(7),
            ..f
        }
    };
    // The final merge fails (the quarantine path is under a file): the parts stay.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, b"a file").unwrap();
    let failed = args("parts", &|f| FileRun {
        quarantine: Some(blocker.join("q.parquet")),
        ..sevens(false)(f)
    });
    assert!(run(failed).is_err());
    assert!(tmp
        .path()
        .join("parts.parquet.parts/manifest.json")
        .is_file());
    // Issue 57: a resume with another option or device setting is refused naming it;
    // a pacing option (the batch budget) may change.
    let other_length = JobArgs {
        config: ClassifyConfig {
            max_length: Some(40),
            ..config.clone()
        },
        ..args("parts", &sevens(true))
    };
    let err = format!("{:#}", run(other_length).unwrap_err());
    assert!(
        err.contains("hopscore.max_length: \"512\" ≠ \"40\""),
        "{err}"
    );
    let other_kernels = JobArgs {
        device: DeviceConfig {
            attention: hopscore::backend::gpu_kernels::Attention::V5,
            ..DeviceConfig::CPU
        },
        ..args("parts", &sevens(true))
    };
    let err = format!("{:#}", run(other_kernels).unwrap_err());
    assert!(
        err.contains("hopscore.attention: \"auto\" ≠ \"v5\""),
        "{err}"
    );
    let resumed = run(args("parts", &sevens(true))).unwrap();
    assert_eq!(resumed.stats.rows, 0, "every row was committed");
    common::assert_parts_equal_whole(tmp.path());
    let smaller_batches = JobArgs {
        config: ClassifyConfig {
            max_batch_tokens: 32,
            ..config.clone()
        },
        ..args("parts", &sevens(true))
    };
    let done = run(smaller_batches).unwrap();
    assert_eq!(done.stats.rows, 0, "the finished run is done, not redone");
    common::assert_parts_equal_whole(tmp.path());

    for i in 0..3 {
        let shard = |f| FileRun {
            shard: Some(hopscore::io::shard::Shard { index: i, count: 3 }),
            ..sevens(false)(f)
        };
        run(args(&format!("s{i}"), &shard)).unwrap();
    }
    common::assert_merged_shards_equal_whole(tmp.path(), 3);
}

/// Issue 26: SIGTERM on a long `classify` waited for the whole group in flight (4,096
/// rows, 36 s there). The run now stops between forward passes and leaves the group's
/// rows to `--resume`: nothing of it is committed, and the run exits 130.
#[test]
fn sigterm_leaves_the_group_in_flight_for_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let input = tmp.path().join("pairs.parquet");
    // One group of 4,096 long rows: many forward passes of 512 tokens.
    let text = |i: usize| {
        (0..500)
            .map(|k| format!("w{}", (i * 7 + k) % 990 + 3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<_> = (0..4096)
        .map(|i| (Some("a"), Some(text(i)), None))
        .collect();
    write_input(&input, &rows);
    let out = tmp.path().join("o.parquet");
    let child = common::hopscore()
        .args([
            "classify",
            "--max-batch-tokens",
            "512",
            "--part-rows",
            "64",
            "--model",
        ])
        .arg(common::fixture("deberta/v3_seqcls"))
        .arg("--tokenizer")
        .arg(&tokenizer)
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The model is loaded and rows are read once the parts directory exists; then the
    // first forward passes run.
    let parts = tmp.path().join("o.parquet.parts");
    common::wait_until("the parts directory", || parts.exists());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (code, err) = common::signal_and_wait(child, "TERM");
    assert_eq!(code, Some(130), "{err}");
    assert!(!out.exists(), "no row of the group was finished");
    let committed = std::fs::read_to_string(parts.join("committed.jsonl")).unwrap_or_default();
    assert_eq!(
        committed, "",
        "nothing committed: the group is left for --resume"
    );
}

/// Issue 26: a column pyarrow infers from `None`s only has type `null`; it is read as
/// a column of nulls (the rows equal those of a string column of nulls).
#[test]
fn an_all_null_column_of_type_null_reads_as_nulls() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let rows: Vec<_> = (0..5)
        .map(|i| (Some("a"), Some(format!("w{} w{}", i + 3, i + 20)), None))
        .collect();
    let typed = tmp.path().join("typed.parquet");
    write_input(&typed, &rows);
    let nulls = tmp.path().join("nulls.parquet");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("text_a", DataType::Utf8, true),
        Field::new("text_b", DataType::Null, true),
    ]));
    let batch = common::read_parquet(&typed);
    let columns = vec![
        batch.column(0).clone(),
        batch.column(1).clone(),
        Arc::new(arrow_array::NullArray::new(5)) as _,
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&nulls).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let scored = |input: &Path, name: &str| {
        let output = tmp.path().join(format!("{name}.parquet"));
        let config = ClassifyConfig {
            tokenizer: Some(tokenizer.clone()),
            max_batch_tokens: 64,
            ..ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
        };
        run(common::job_args(config, input, &output)).unwrap();
        common::read_parquet(&output)
    };
    let (a, b) = (scored(&typed, "a"), scored(&nulls, "b"));
    assert_eq!(a.num_rows(), 5);
    assert_eq!(a.columns(), b.columns());
}

/// `hopscore classify --device cuda --dtype bf16` on the fixture model through the binary
/// (whose self-test children are itself), with `cache` as `HOPSCORE_CACHE`, `fault` as
/// the emulator's `HOPSCORE_CUDA_EMU_FAULT` and `flags` after the others; the exit
/// status, stderr, and the output's logits bits and metadata.
#[cfg(feature = "cuda")]
fn cuda_classify_cli(
    dir: &Path,
    name: &str,
    cache: &Path,
    fault: &str,
    flags: &[&str],
) -> (
    bool,
    String,
    Vec<Vec<u32>>,
    std::collections::HashMap<String, String>,
) {
    let (pairs, _) = golden_pairs();
    let rows: Vec<_> = pairs
        .iter()
        .enumerate()
        .map(|(i, (a, b))| {
            (
                Some(["p", "q", "r", "s", "t"][i % 5]),
                Some(a.clone()),
                Some(b.clone()),
            )
        })
        .collect();
    let input = dir.join("pairs.parquet");
    if !input.exists() {
        write_input(&input, &rows);
    }
    let output = dir.join(format!("{name}.parquet"));
    let run = common::hopscore()
        .args(["classify", "--device", "cuda", "--dtype", "bf16", "--model"])
        .arg(common::fixture("deberta/v3_seqcls"))
        .arg("--tokenizer")
        .arg(common::word_tokenizer(dir))
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .args(flags)
        .env("HOPSCORE_CACHE", cache)
        .env("HOPSCORE_CUDA_EMU_FAULT", fault)
        .env("HOPSCORE_GPU_SELFTEST_TIMEOUT", "5")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    if !run.status.success() {
        return (false, stderr, Vec::new(), Default::default());
    }
    let out = common::read_parquet(&output);
    let logits = out.column(1).as_any().downcast_ref::<ListArray>().unwrap();
    let bits = (0..out.num_rows())
        .map(|r| {
            let v = logits.value(r);
            let v = v.as_any().downcast_ref::<Float32Array>().unwrap();
            v.values().iter().map(|x| x.to_bits()).collect()
        })
        .collect();
    (true, stderr, bits, key_values(&output))
}

/// `hopscore doctor --kernels` (what the kit turns into kernels/proven.tsv rows) lists
/// every shipped entry per SASS architecture with the SHA-256 of its machine code, and
/// names the cards of each record kernels/proven.tsv holds for that very hash.
#[cfg(feature = "cuda")]
#[test]
fn doctor_lists_each_kernels_hash_and_the_cards_it_passed_on() {
    let out = common::hopscore()
        .args(["doctor", "--kernels"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    if hopscore::backend::kernels::KERNEL_SASS.is_empty() {
        // A build without nvcc (the README's test command on a machine without it).
        assert!(text.contains("ships no CUDA kernels"), "{text}");
        return;
    }
    let rows: std::collections::HashMap<(&str, &str), (&str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "{l}");
            assert!(
                f[2].len() == 64 && f[2].bytes().all(|b| b.is_ascii_hexdigit()),
                "{l}"
            );
            ((f[0], f[1]), (f[2], f[3]))
        })
        .collect();
    assert!(rows.len() > 100, "{} entries", rows.len());
    let records =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/proven.tsv"))
            .unwrap();
    let mut checked = 0;
    for line in records
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        let (sha, cards) = rows[&(f[0], f[1])];
        assert_eq!(sha, f[2], "{line}");
        assert!(cards.split(", ").any(|c| c == f[3]), "{line}: {cards}");
        checked += 1;
    }
    assert!(checked > 100);
    // The 2026-11-26 RoPE on sm_90 ran on both cards; v2 (rewritten since) on none.
    assert_eq!(
        rows[&("rope_v1_bf16", "sm_90")].1,
        "NVIDIA H100 80GB HBM3, NVIDIA H200"
    );
    assert_eq!(rows[&("rope_bf16", "sm_90")].1, "-");
    assert!(!rows
        .keys()
        .any(|(e, _)| e.starts_with("disentangled_attention_v4")));
}

/// Issue 55: `hopscore doctor --device cuda` passes every kernel implementation on the
/// emulator, one line each, and says what a job runs; its verdicts are the cache a job
/// then reads (no child process: a fault injected now is not seen).
#[cfg(feature = "cuda")]
#[test]
fn cuda_doctor_passes_every_kernel_and_its_verdicts_are_reused() {
    use hopscore::backend::dtype::DType;
    if common::gpu(DType::Bf16).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let doctor = common::hopscore()
        .args([
            "doctor",
            "--device",
            "cuda",
            "--dtype",
            "bf16",
            "--timeout",
            "20",
        ])
        .env("HOPSCORE_CACHE", &cache)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    let verdicts: Vec<&str> = text
        .lines()
        .filter(|l| {
            ["pass", "fail", "hang", "error"]
                .iter()
                .any(|w| l.starts_with(w))
        })
        .collect();
    // On compute capability 9.0 in bf16: two implementations of each of six ops.
    assert_eq!(verdicts.len(), 12, "{text}");
    assert!(verdicts.iter().all(|l| l.starts_with("pass ")), "{text}");
    assert!(text.contains("gemm_add_norm   fused    rel err"), "{text}");
    assert!(
        text.contains("rope            v1       hardware (H100"),
        "{text}"
    );
    // The job finds the verdicts cached: the fault below would fail the fused GEMM's
    // case if a child ran it; none does, and the job runs what the doctor said.
    let (ok, err, _, meta) = cuda_classify_cli(
        tmp.path(),
        "cached",
        &cache,
        "gemm_bias_gelu:wrong",
        &["--gpu-kernels", "proven"],
    );
    assert!(ok, "{err}");
    assert!(
        !err.contains("each in a child process"),
        "no self-test ran: {err}"
    );
    let plan: serde_json::Value = serde_json::from_str(&meta["hopscore.gpu_kernels"]).unwrap();
    assert_eq!(
        plan["gemm_bias_gelu"],
        "unfused: hardware (H100 80GB HBM3, H200)"
    );
    assert_eq!(plan["rope"], "v1: hardware (H100 80GB HBM3, H200)");
}

/// Issue 55: a fused GEMM that hangs, answers wrong or fails its launch on this card is
/// found by the self-test in a child process; `--gpu-kernels latest` then finishes on
/// the unfused path with one warning naming the op, records the fallback, and writes
/// the bits of a run that asked for that path, and the logits of a `proven` run within
/// the bf16 bound; the verdicts are cached, so a second run starts no child.
#[cfg(feature = "cuda")]
#[test]
fn cuda_a_failing_fused_kernel_is_replaced_after_the_self_test() {
    use hopscore::backend::dtype::DType;
    if common::gpu(DType::Bf16).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (ok, err, proven, _) = cuda_classify_cli(
        tmp.path(),
        "proven",
        &tmp.path().join("proven-cache"),
        "",
        &["--gpu-kernels", "proven"],
    );
    assert!(ok, "{err}");
    for (kernel, op, switch) in [
        ("gemm_bias_gelu", "gemm_bias_gelu", "--fused-gelu"),
        ("gemm_add_norm_1024", "gemm_add_norm", "--fused-norm"),
    ] {
        // What the fallback should write: `latest` with that one GEMM switched off.
        let (ok, err, unfused, _) = cuda_classify_cli(
            tmp.path(),
            &format!("{op}-off"),
            &tmp.path().join(format!("{op}-off-cache")),
            "",
            &["--gpu-kernels", "latest", switch, "off"],
        );
        assert!(ok, "{err}");
        for kind in ["hang", "wrong", "error"] {
            let cache = tmp.path().join(format!("cache-{kernel}-{kind}"));
            let fault = format!("{kernel}:{kind}");
            let name = format!("{kernel}-{kind}");
            let (ok, err, bits, meta) = cuda_classify_cli(
                tmp.path(),
                &name,
                &cache,
                &fault,
                &["--gpu-kernels", "latest"],
            );
            assert!(ok, "{fault}: {err}");
            let warnings: Vec<&str> = err
                .lines()
                .filter(|l| l.starts_with("warning:") && l.contains(op))
                .collect();
            assert_eq!(warnings.len(), 1, "{fault}: {err}");
            assert!(warnings[0].contains("--fused-"), "{fault}: {}", warnings[0]);
            let plan: serde_json::Value =
                serde_json::from_str(&meta["hopscore.gpu_kernels"]).unwrap();
            // A wrong answer is the case's `fail`.
            let outcome = if kind == "wrong" { "fail" } else { kind };
            let want = format!("unfused: fallback: fused {outcome}");
            assert!(
                plan[op].as_str().unwrap().starts_with(&want),
                "{fault}: {plan}"
            );
            // The rows are those of `latest` with the GEMM switched off, bit for bit
            // (this model, hidden 32, has no gemm_add_norm row width: that fault changes
            // only the plan), and near the proven path's.
            assert_eq!(bits, unfused, "{fault}");
            let scale = proven
                .iter()
                .flatten()
                .fold(0f32, |m, &b| m.max(f32::from_bits(b).abs()));
            for (got, want) in bits.iter().flatten().zip(proven.iter().flatten()) {
                let (a, b) = (f32::from_bits(*got), f32::from_bits(*want));
                assert!((a - b).abs() <= 5e-2 * scale, "{fault}: {a} vs proven {b}");
            }
            // Again, verdicts cached: no child (the hang would cost its timeout).
            let (ok, err, again, _) = cuda_classify_cli(
                tmp.path(),
                &format!("{name}-again"),
                &cache,
                &fault,
                &["--gpu-kernels", "latest"],
            );
            assert!(
                ok && !err.contains("each in a child process"),
                "{fault}: {err}"
            );
            assert_eq!(again, bits, "{fault}");
        }
    }
}

/// Issue 55: a fused GEMM whose setup fails on the card (here no cluster of 8 fits) is
/// not a failed run: the launcher warns and takes the unfused path, and the self-test
/// reports the kernel as an error, so that a job's plan leaves it out from the start.
#[cfg(feature = "cuda")]
#[test]
fn cuda_a_fused_gemm_whose_setup_fails_is_left_out() {
    use hopscore::backend::dtype::DType;
    if common::gpu(DType::Bf16).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let doctor = common::hopscore()
        .args(["doctor", "--device", "cuda", "--gpu-kernels", "latest"])
        .env("HOPSCORE_CACHE", tmp.path())
        .env("HOPSCORE_CUDA_EMU_FAULT", "gemm_add_norm_1024:nocluster")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("gemm_add_norm   fused"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with("error") && line.contains("cannot run on this device (no cluster fits)"),
        "{line}"
    );
    assert!(
        text.contains("gemm_add_norm   unfused  fallback: fused error"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("pass")).count(),
        11,
        "{text}"
    );
}
