//! DeBERTa-v3 tokenizer ids against HF's fast tokenizer of the same tokenizer.json
//! (tests/fixtures/tokenizer/deberta_v3_ids.json, written by
//! tools/goldens/make_tokenizer_goldens.py): the 45 of its 60 real question/passage pairs whose
//! questions are in the data slices of tests/fixtures/data (15 per dataset), and 17
//! project-written edge cases stored with their text.

use crate::common;

use hopscore::text::TextTokenizer;
use serde_json::Value;

use common::json_ids as ids;

/// Checks the four encodings of one (question, passage) entry; returns a label on mismatch.
fn check(
    plain: &TextTokenizer,
    trunc: &TextTokenizer,
    q: &str,
    p: &str,
    e: &Value,
) -> Result<(), String> {
    let pair = plain.encode_pair(q, Some(p)).unwrap();
    let cut = trunc.encode_pair(q, Some(p)).unwrap();
    let got = [
        ("question_ids", plain.encode_plain(q).unwrap()),
        ("passage_ids", plain.encode_plain(p).unwrap()),
        ("pair_ids", pair.ids),
        ("pair_type_ids", pair.type_ids),
        ("pair_trunc_ids", cut.ids),
        ("pair_trunc_type_ids", cut.type_ids),
    ];
    for (key, ours) in got {
        if ours != ids(&e[key]) {
            return Err(format!("{key} differs"));
        }
    }
    Ok(())
}

fn tokenizers() -> Option<(TextTokenizer, TextTokenizer, Value)> {
    let path = common::DEBERTA_V3_TOKENIZER.require()?;
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("tokenizer/deberta_v3_ids.json")).unwrap(),
    )
    .unwrap();
    let max = golden["pair_trunc"]["max_length"].as_u64().unwrap() as usize;
    Some((
        TextTokenizer::from_file(&path, None).unwrap(),
        TextTokenizer::from_file(&path, Some(max)).unwrap(),
        golden,
    ))
}

#[test]
fn project_written_edge_cases_match_hf() {
    let Some((plain, trunc, golden)) = tokenizers() else {
        return;
    };
    let cases = golden["custom"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for c in cases {
        let (q, p) = (
            c["question"].as_str().unwrap(),
            c["passage"].as_str().unwrap(),
        );
        check(&plain, &trunc, q, p, c).unwrap_or_else(|e| panic!("{}: {e}", c["name"]));
    }
}

#[test]
fn real_question_passage_pairs_match_hf() {
    let Some((plain, trunc, golden)) = tokenizers() else {
        return;
    };
    let data: std::collections::HashMap<_, _> = ["hotpotqa", "musique", "2wiki"]
        .into_iter()
        .map(|name| (name, common::data_records(name)))
        .collect();
    let cases = golden["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 60);
    let mut checked = std::collections::BTreeMap::new();
    for c in cases {
        let ds = c["dataset"].as_str().unwrap();
        let id = c["id"].as_str().unwrap();
        let k = c["passage"].as_u64().unwrap() as usize;
        let Some(rec) = common::find_record(&data[ds], id) else {
            continue; // a question of the full sample outside the slice
        };
        *checked.entry(ds).or_insert(0) += 1;
        let question = rec["question"].as_str().unwrap();
        let passage = if ds == "musique" {
            let para = &rec["paragraphs"][k];
            format!(
                "{}.{}",
                para["title"].as_str().unwrap(),
                para["paragraph_text"].as_str().unwrap()
            )
        } else {
            let ctx = &rec["context"][k];
            let sents: String = ctx[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            format!("{}{sents}", ctx[0].as_str().unwrap())
        };
        check(&plain, &trunc, question, &passage, c)
            .unwrap_or_else(|e| panic!("{ds} {id} passage {k}: {e}"));
    }
    let want = [("2wiki", 15), ("hotpotqa", 15), ("musique", 15)];
    assert_eq!(checked, want.into_iter().collect());
}
