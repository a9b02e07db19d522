//! `hopscore import` → `hopscore beam` end to end on the real HotpotQA and MuSiQue
//! slices of tests/fixtures/data: chains equal the Python reference's, a run SIGKILLed
//! at several points and resumed writes the same bytes as an uninterrupted one, and
//! shards merged with `hopscore merge` equal an unsharded run.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use arrow_array::{Array, Int32Array, ListArray, RecordBatch, StringArray};
use hopscore::io::questions::{QuestionReader, QuestionWriter};

/// The slice of `dataset` imported into `dir`; `None` when the tokenizer is absent and
/// skips are allowed.
fn import(dataset: &str, dir: &Path) -> Option<PathBuf> {
    common::DEBERTA_V3_TOKENIZER.require()?;
    let src = common::data_file(dataset);
    let out = dir.join(format!("{dataset}.parquet"));
    let st = common::hopscore()
        .args(["import", dataset])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "import failed");
    Some(out)
}

fn beam(input: &Path, output: &Path, extra: &[&str]) -> Command {
    common::question_command("beam", &[("--model", "beam/model")], input, output, extra)
}

fn chains(batch: &RecordBatch) -> Vec<(String, Vec<i32>)> {
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let chain = batch
        .column(1)
        .as_any()
        .downcast_ref::<ListArray>()
        .unwrap();
    (0..batch.num_rows())
        .map(|r| {
            let c = chain.value(r);
            let c = c.as_any().downcast_ref::<Int32Array>().unwrap();
            (ids.value(r).to_string(), c.values().to_vec())
        })
        .collect()
}

#[test]
fn killed_and_resumed_runs_write_the_same_bytes_and_the_reference_chains() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(slice) = import("hotpotqa", tmp.path()) else {
        return;
    };
    // The 20 questions COPIES times over (ids of the copies suffixed `~k`), so that the
    // run lasts long enough for the kills to land between parts.
    const COPIES: usize = 8;
    let qs: Vec<_> = QuestionReader::open(&slice, 64)
        .unwrap()
        .map(|r| r.unwrap().unwrap())
        .collect();
    let questions = tmp.path().join("copies.parquet");
    let mut w = QuestionWriter::create(&questions, &[]).unwrap();
    w.write(&qs).unwrap();
    for k in 1..COPIES {
        let mut copy = qs.clone();
        for q in &mut copy {
            q.id = format!("{}~{k}", q.id);
        }
        w.write(&copy).unwrap();
    }
    w.finish().unwrap();
    let args = ["--shard", "0/1", "--part-rows", "8", "--beam-size", "2"];
    let whole = tmp.path().join("whole.parquet");
    assert!(beam(&questions, &whole, &args).status().unwrap().success());

    let resumed = tmp.path().join("resumed.parquet");
    let parts = tmp.path().join("resumed.parquet.parts");
    let mut kills = 0;
    let mut delay_ms = 150u64;
    while kills < 6 {
        let mut cmd = beam(&questions, &resumed, &args);
        if parts.exists() {
            cmd.arg("--resume");
        }
        let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        if child.try_wait().unwrap().is_some() {
            break; // finished before the kill: the run was too short for this delay
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        delay_ms += 137;
    }
    assert!(
        kills >= 5,
        "only {kills} kills landed before the run finished"
    );

    // Ctrl-C: the run commits the rows in flight and exits with 130, keeping the parts
    // of the killed runs. On a loaded machine every kill may land before a run committed
    // a part (its manifest and log then list none), and a run stopped before its first
    // commit removes the directory: then there is nothing to keep.
    let read = |f: &str| std::fs::read_to_string(parts.join(f)).unwrap_or_default();
    let had_parts = read("manifest.json").contains("part-")
        || read("committed.jsonl")
            .split_inclusive('\n')
            .any(|line| line.ends_with('\n') && line.contains("part-")); // whole lines
    let mut child = beam(&questions, &resumed, &args)
        .arg("--resume")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(900));
    if child.try_wait().unwrap().is_none() {
        let st = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(
            child.wait().unwrap().code(),
            Some(130),
            "Ctrl-C exits with 130"
        );
        assert!(
            !had_parts || parts.join("manifest.json").is_file(),
            "committed parts are kept"
        );
    } else {
        child.wait().unwrap();
    }
    let mut cmd = beam(&questions, &resumed, &args);
    if parts.exists() {
        cmd.arg("--resume");
    }
    assert!(cmd.status().unwrap().success());
    common::assert_resumed_equals_whole(tmp.path());

    // The chains equal the Python reference's for the golden HotpotQA questions at B = 2
    // (16 of the slice's 20), in every copy.
    let got = chains(&common::read_parquet(&whole));
    assert_eq!(got.len(), qs.len() * COPIES);
    let golden: serde_json::Value = common::fixture_json("beam/goldens.json");
    let mut checked = 0;
    for g in golden["questions"].as_array().unwrap() {
        if g["dataset"] != "hotpotqa" || g["beam_size"] != 2 {
            continue;
        }
        let want: Vec<i32> = g["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap() as i32)
            .collect();
        let id = g["id"].as_str().unwrap();
        let r = qs.iter().position(|q| q.id == id).unwrap();
        for k in 0..COPIES {
            let (got_id, chain) = &got[k * qs.len() + r];
            assert!(got_id.starts_with(id));
            assert_eq!(chain, &want, "question {id}, copy {k}");
        }
        checked += 1;
    }
    assert_eq!(checked, 16);
}

#[test]
fn merged_shards_equal_an_unsharded_run() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(questions) = import("musique", tmp.path()) else {
        return;
    };
    let all = tmp.path().join("all.parquet");
    assert!(beam(&questions, &all, &["--shard", "0/1"])
        .status()
        .unwrap()
        .success());
    let mut shards = Vec::new();
    for i in [2, 0, 1] {
        let out = tmp.path().join(format!("s{i}.parquet"));
        assert!(beam(&questions, &out, &["--shard", &format!("{i}/3")])
            .status()
            .unwrap()
            .success());
        shards.push(out);
    }
    let merged = tmp.path().join("merged.parquet");
    let st = common::hopscore()
        .arg("merge")
        .args(&shards)
        .arg("-o")
        .arg(&merged)
        .status()
        .unwrap();
    assert!(st.success());
    let (a, b) = (common::read_parquet(&all), common::read_parquet(&merged));
    assert_eq!(a.num_rows(), 20);
    for (k, field) in a.schema().fields().iter().enumerate() {
        if a.column(k) != b.column(k) {
            for r in 0..a.num_rows() {
                let (x, y) = (a.column(k).slice(r, 1), b.column(k).slice(r, 1));
                if x.as_ref() != y.as_ref() {
                    panic!("column `{}` row {r}: {x:?} vs {y:?}", field.name());
                }
            }
        }
    }

    // An incomplete set is refused.
    let out = common::hopscore()
        .arg("merge")
        .args(&shards[..2])
        .arg("-o")
        .arg(tmp.path().join("x.parquet"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing shards: 1/3"));
}

/// Issue 26: a model whose scores overflow (here classifier weights of 3e38, finite,
/// so the load check passes) ranked chains by NaN. Each such question goes to the
/// quarantine file with the reason; the run goes on.
#[test]
fn non_finite_scores_quarantine_the_question() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(slice) = import("hotpotqa", tmp.path()) else {
        return;
    };
    let src = common::fixture("beam/model");
    let model = tmp.path().join("overflowing");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(src.join("config.json"), model.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let huge = half::bf16::from_f32(3.0e38).to_le_bytes();
    let tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            let mut data = v.data().to_vec();
            if name.starts_with("hop_classifier_layer.weight") {
                assert_eq!(v.dtype(), safetensors::Dtype::BF16);
                data.chunks_exact_mut(2)
                    .for_each(|c| c.copy_from_slice(&huge));
            }
            (name, v.dtype(), v.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            let view = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &model.join("model.safetensors")).unwrap();
    let out = tmp.path().join("chains.parquet");
    let status = common::hopscore()
        .args(["beam", "--model"])
        .arg(&model)
        .arg("--tokenizer")
        .arg(common::DEBERTA_V3_TOKENIZER.path())
        .arg("--input")
        .arg(&slice)
        .arg("--output")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let bad = common::read_parquet(&tmp.path().join("chains.quarantine.parquet"));
    let reasons = bad
        .column_by_name("reason")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert!(reasons.iter().all(|r| r
        .unwrap()
        .starts_with("the model produced a non-finite score")));
    // Every question the model scored overflows; what is left was returned unscored
    // (a pool no larger than the hop count).
    let kept = common::read_parquet(&out);
    let questions = QuestionReader::open(&slice, 64).unwrap().count();
    assert_eq!(bad.num_rows() + kept.num_rows(), questions);
    assert!(
        bad.num_rows() >= questions - 1,
        "{} quarantined",
        bad.num_rows()
    );
    assert_eq!(
        kept.column_by_name("chain_score").unwrap().null_count(),
        kept.num_rows()
    );
}
