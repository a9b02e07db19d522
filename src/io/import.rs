//! Conversion of native dataset records (parsed JSON) into [`Question`]s.
//!
//! Choices, also listed in the README ("Question files"):
//! - Titles and texts are kept byte for byte (HTML escapes such as `&amp;` stay), because
//!   the official SP metric compares the raw titles of the gold file.
//! - HotpotQA/2Wiki: `text` is the sentences joined without separator, as Beam
//!   Retrieval renders them; the sentences are kept too. A passage is supporting when its
//!   title appears in `supporting_facts` (every passage with that title, if repeated).
//! - A supporting fact whose sentence index is past the end of its passage (a known 2Wiki
//!   quirk) keeps the question and the fact unchanged (the official evaluator scores
//!   against it) and adds a line to `issues`. A fact naming a title no passage has, or
//!   a malformed fact, makes the gold labels unusable: the question is kept (scoring
//!   does not read gold labels) with the problem in `issues`, and `eval` skips it.
//! - Hops: HotpotQA 2; 2Wiki 2, 4 for `bridge_comparison`; MuSiQue the number in the
//!   id prefix (`2hop__`, `3hop1__`, `4hop3__`), null (with an issue) when it has none.

use serde_json::{Map, Value};

use super::questions::{Dataset, Passage, Question, SupportingFact, UNUSABLE_GOLD};

type Obj = Map<String, Value>;

/// The record's id for quarantine rows (`_id` or `id`, when it is a string).
pub fn record_id(v: &Value) -> Option<String> {
    ["_id", "id"]
        .iter()
        .find_map(|k| v.get(k).and_then(Value::as_str))
        .map(str::to_string)
}

/// Converts one native record; the error is the quarantine reason.
pub fn convert(dataset: Dataset, v: &Value) -> Result<Question, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("the record is {}, expected a JSON object", kind(v)))?;
    let q = match dataset {
        Dataset::HotpotQa | Dataset::TwoWiki => hotpot_format(dataset, o),
        Dataset::Musique => musique(o),
    };
    let mut q = q.map_err(|e| e + &other_format_hint(dataset, o))?;
    q.check()?;
    q.note_gold_problems(Vec::new());
    Ok(q)
}

/// A hint for records that look like another dataset's (a wrong `import` argument).
fn other_format_hint(dataset: Dataset, o: &Obj) -> String {
    let looks_like = |own: &str, other: &str| !o.contains_key(own) && o.contains_key(other);
    match dataset {
        Dataset::HotpotQa | Dataset::TwoWiki if looks_like("context", "paragraphs") => {
            " (the record has `paragraphs`, not `context`: is this MuSiQue? use `hopscore import musique`)".into()
        }
        Dataset::Musique if looks_like("paragraphs", "context") => {
            " (the record has `context`, not `paragraphs`: is this HotpotQA or 2Wiki? use `hopscore import hotpotqa` or `2wiki`)".into()
        }
        _ => String::new(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn opt_str<'a>(o: &'a Obj, key: &str) -> Result<Option<&'a str>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{key}` is {}, expected a string", kind(other))),
    }
}

fn req_str<'a>(o: &'a Obj, key: &str) -> Result<&'a str, String> {
    opt_str(o, key)?.ok_or_else(|| format!("`{key}` is missing"))
}

fn opt_array<'a>(o: &'a Obj, key: &str) -> Result<Option<&'a [Value]>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => Err(format!("`{key}` is {}, expected an array", kind(other))),
    }
}

fn req_array<'a>(o: &'a Obj, key: &str) -> Result<&'a [Value], String> {
    opt_array(o, key)?.ok_or_else(|| format!("`{key}` is missing"))
}

/// HotpotQA and 2Wiki share one layout: `_id`, `question`, `answer`, `type`, `level`,
/// `context: [[title, [sentence, …]], …]`, `supporting_facts: [[title, sent_idx], …]`.
fn hotpot_format(dataset: Dataset, o: &Obj) -> Result<Question, String> {
    let context = req_array(o, "context")?;
    let passages = context
        .iter()
        .enumerate()
        .map(|(k, item)| hotpot_passage(k, item))
        .collect::<Result<Vec<_>, _>>()?;
    let mut issues = Vec::new();
    let facts = opt_array(o, "supporting_facts")?
        .map(|facts| {
            facts
                .iter()
                .enumerate()
                .map(|(k, f)| supporting_fact(k, f))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .unwrap_or_else(|why| {
            issues.push(format!("{UNUSABLE_GOLD}{why}"));
            None
        });
    let mut supporting = Vec::new();
    for (i, p) in passages.iter().enumerate() {
        if facts.iter().flatten().any(|f| f.title == p.title) {
            supporting.push(i);
        }
    }
    for fact in facts.iter().flatten() {
        let with_title: Vec<&Passage> = passages.iter().filter(|p| p.title == fact.title).collect();
        let sentences = |p: &Passage| p.sentences.as_ref().map_or(0, Vec::len);
        if !with_title.is_empty()
            && with_title
                .iter()
                .all(|p| fact.sent_idx as usize >= sentences(p))
        {
            issues.push(format!(
                "supporting fact ({:?}, {}) points past the {} sentences of that passage; kept as in the source",
                fact.title,
                fact.sent_idx,
                sentences(with_title[0])
            ));
        }
    }
    let mut titles: Vec<&str> = supporting
        .iter()
        .map(|&i| passages[i].title.as_str())
        .collect();
    titles.sort_unstable();
    titles.dedup();
    if titles.len() < supporting.len() {
        issues.push(format!(
            "a supporting title names several passages; all {} of them are marked supporting",
            supporting.len()
        ));
    }
    let question_type = opt_str(o, "type")?;
    let hops = match (dataset, question_type) {
        (Dataset::TwoWiki, Some("bridge_comparison")) => 4,
        _ => 2,
    };
    Ok(Question {
        id: req_str(o, "_id")?.to_string(),
        dataset,
        question: req_str(o, "question")?.to_string(),
        passages,
        supporting,
        hops: Some(hops),
        answer: opt_str(o, "answer")?.map(str::to_string),
        answer_aliases: Vec::new(),
        question_type: question_type.map(str::to_string),
        level: opt_str(o, "level")?.map(str::to_string),
        supporting_facts: facts,
        issues,
    })
}

/// `[title, [sentence, …]]`.
fn hotpot_passage(k: usize, item: &Value) -> Result<Passage, String> {
    let pair = match item.as_array().map(Vec::as_slice) {
        Some([title, sentences]) => (title, sentences),
        _ => {
            return Err(format!(
                "context entry {k} is not a [title, sentences] pair"
            ))
        }
    };
    let title = pair.0.as_str().ok_or_else(|| {
        format!(
            "the title of passage {k} is {}, expected a string",
            kind(pair.0)
        )
    })?;
    let sentences = match pair.1 {
        Value::Null => return Err(format!("passage {k} ({title:?}) has null text")),
        Value::Array(s) => s,
        other => {
            return Err(format!(
                "the sentences of passage {k} ({title:?}) are {}, expected an array of strings",
                kind(other)
            ))
        }
    };
    let sentences = sentences
        .iter()
        .enumerate()
        .map(|(j, s)| match s {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!(
                "sentence {j} of passage {k} ({title:?}) is {}, expected a string",
                kind(other)
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Passage {
        title: title.to_string(),
        text: sentences.concat(),
        sentences: Some(sentences),
    })
}

/// `[title, sent_idx]`.
fn supporting_fact(k: usize, f: &Value) -> Result<SupportingFact, String> {
    match f.as_array().map(Vec::as_slice) {
        Some([Value::String(title), idx]) => {
            let sent_idx = idx
                .as_u64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| format!("supporting fact {k} has sentence index {idx}, expected a non-negative integer"))?;
            Ok(SupportingFact {
                title: title.clone(),
                sent_idx,
            })
        }
        _ => Err(format!(
            "supporting fact {k} is not a [title, sentence index] pair: {f}"
        )),
    }
}

/// MuSiQue: `id`, `question`, `answer`, `answer_aliases`,
/// `paragraphs: [{idx, title, paragraph_text, is_supporting}, …]`.
fn musique(o: &Obj) -> Result<Question, String> {
    let id = req_str(o, "id")?;
    let paragraphs = req_array(o, "paragraphs")?;
    let mut passages = Vec::with_capacity(paragraphs.len());
    let mut supporting = Vec::new();
    for (k, p) in paragraphs.iter().enumerate() {
        let p = p
            .as_object()
            .ok_or_else(|| format!("paragraph {k} is {}, expected an object", kind(p)))?;
        let in_paragraph = |e: String| format!("paragraph {k}: {e}");
        let title = req_str(p, "title").map_err(in_paragraph)?;
        let text = match p.get("paragraph_text") {
            Some(Value::Null) => return Err(format!("paragraph {k} ({title:?}) has null text")),
            _ => req_str(p, "paragraph_text").map_err(in_paragraph)?,
        };
        match p.get("is_supporting") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => supporting.push(k),
            Some(other) => {
                return Err(format!(
                    "paragraph {k}: `is_supporting` is {}, expected a boolean",
                    kind(other)
                ))
            }
        }
        passages.push(Passage {
            title: title.to_string(),
            text: text.to_string(),
            sentences: None,
        });
    }
    let answer_aliases = opt_array(o, "answer_aliases")?
        .unwrap_or_default()
        .iter()
        .map(|a| {
            a.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("an answer alias is {}, expected a string", kind(a)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let hops = musique_hops(id);
    let issues = match hops {
        Some(_) => Vec::new(),
        None => vec![format!(
            "id {id:?} has no `<n>hop` prefix; hops left null (eval then uses the number of supporting passages)"
        )],
    };
    Ok(Question {
        id: id.to_string(),
        dataset: Dataset::Musique,
        question: req_str(o, "question")?.to_string(),
        passages,
        supporting,
        hops,
        answer: opt_str(o, "answer")?.map(str::to_string),
        answer_aliases,
        question_type: None,
        level: None,
        supporting_facts: None,
        issues,
    })
}

/// The hop count in a MuSiQue id: `2hop__…` → 2, `3hop1__…` → 3, `4hop3__…` → 4.
pub fn musique_hops(id: &str) -> Option<u32> {
    let digits = id.len() - id.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || !id[digits..].starts_with("hop") {
        return None;
    }
    id[..digits].parse().ok().filter(|&h| h > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hotpot() -> Value {
        json!({
            "_id": "q1", "question": "Who?", "answer": "Ann", "type": "bridge", "level": "hard",
            "context": [["A &amp; B", ["One.", " Two."]], ["C", ["Three."]], ["D", []]],
            "supporting_facts": [["A &amp; B", 1], ["D", 0]]
        })
    }

    #[test]
    fn hotpot_record_converts_with_joined_text_and_supporting_titles() {
        let q = convert(Dataset::HotpotQa, &hotpot()).unwrap();
        assert_eq!(q.passages[0].title, "A &amp; B");
        assert_eq!(q.passages[0].text, "One. Two.");
        assert_eq!(q.passages[2].text, "");
        assert_eq!(q.supporting, vec![0, 2]);
        assert_eq!((q.hops, q.level.as_deref()), (Some(2), Some("hard")));
        // ("D", 0) points past D's zero sentences: kept, with an issue.
        assert_eq!(q.supporting_facts.as_ref().unwrap().len(), 2);
        assert_eq!(q.issues.len(), 1);
        assert!(
            q.issues[0].contains("(\"D\", 0) points past the 0 sentences"),
            "{}",
            q.issues[0]
        );
    }

    #[test]
    fn two_wiki_bridge_comparison_has_four_hops() {
        let mut v = hotpot();
        v["type"] = json!("bridge_comparison");
        assert_eq!(convert(Dataset::TwoWiki, &v).unwrap().hops, Some(4));
        assert_eq!(convert(Dataset::HotpotQa, &v).unwrap().hops, Some(2));
    }

    #[test]
    fn bad_hotpot_records_give_reasons() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([1]), "the record is an array"),
            (
                {
                    let mut v = hotpot();
                    v.as_object_mut().unwrap().remove("question");
                    v
                },
                "`question` is missing",
            ),
            (
                {
                    let mut v = hotpot();
                    v["question"] = json!(7);
                    v
                },
                "`question` is a number",
            ),
            (
                {
                    let mut v = hotpot();
                    v["context"] = json!([]);
                    v
                },
                "no passages",
            ),
            (
                {
                    let mut v = hotpot();
                    v["context"][1][1] = Value::Null;
                    v
                },
                "passage 1 (\"C\") has null text",
            ),
            (
                {
                    let mut v = hotpot();
                    v["context"][1][1][0] = Value::Null;
                    v
                },
                "sentence 0 of passage 1 (\"C\") is null",
            ),
            (
                {
                    let mut v = hotpot();
                    v.as_object_mut().unwrap().remove("context");
                    v["paragraphs"] = json!([]);
                    v
                },
                "is this MuSiQue?",
            ),
        ];
        for (v, want) in cases {
            let err = convert(Dataset::HotpotQa, &v).unwrap_err();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
    }

    #[test]
    fn broken_gold_labels_keep_the_question_with_an_issue() {
        for (edit, want) in [
            ((0, json!("Zed")), "title \"Zed\" is not the title"),
            ((1, json!(-1)), "sentence index -1"),
        ] {
            let mut v = hotpot();
            v["supporting_facts"][0][edit.0] = edit.1;
            let q = convert(Dataset::HotpotQa, &v).unwrap();
            assert!(!q.gold_usable());
            assert!(
                q.issues
                    .iter()
                    .any(|i| i.starts_with(UNUSABLE_GOLD) && i.contains(want)),
                "{:?} lacks {want:?}",
                q.issues
            );
        }
    }

    #[test]
    fn musique_record_converts() {
        let v = json!({
            "id": "3hop1__9_8_7", "question": "Q?", "answer": "x", "answer_aliases": ["y"], "answerable": true,
            "paragraphs": [
                {"idx": 0, "title": "T0", "paragraph_text": "P0", "is_supporting": false},
                {"idx": 1, "title": "T1", "paragraph_text": "P1", "is_supporting": true},
                {"idx": 2, "title": "T2", "paragraph_text": "P2", "is_supporting": true}
            ]
        });
        let q = convert(Dataset::Musique, &v).unwrap();
        assert_eq!((q.supporting.clone(), q.hops), (vec![1, 2], Some(3)));
        assert_eq!(
            (q.passages[1].title.as_str(), q.passages[1].text.as_str()),
            ("T1", "P1")
        );
        assert_eq!(q.passages[1].sentences, None);
        assert_eq!(q.answer_aliases, vec!["y".to_string()]);
        assert!(q.supporting_facts.is_none() && q.question_type.is_none() && q.issues.is_empty());

        let mut bad = v.clone();
        bad["paragraphs"][2]["paragraph_text"] = Value::Null;
        assert_eq!(
            convert(Dataset::Musique, &bad).unwrap_err(),
            "paragraph 2 (\"T2\") has null text"
        );
        let mut bad = v.clone();
        bad["paragraphs"][0]["is_supporting"] = json!("yes");
        assert!(convert(Dataset::Musique, &bad)
            .unwrap_err()
            .contains("`is_supporting` is a string"));
        let mut odd = v;
        odd["id"] = json!("custom_1");
        let q = convert(Dataset::Musique, &odd).unwrap();
        assert_eq!((q.hops, q.hop_count(), q.issues.len()), (None, 2, 1));
    }

    #[test]
    fn musique_hops_from_id_prefix() {
        assert_eq!(musique_hops("2hop__1_2"), Some(2));
        assert_eq!(musique_hops("3hop1__1_2_3"), Some(3));
        assert_eq!(musique_hops("4hop3__1"), Some(4));
        assert_eq!(musique_hops("hop__1"), None);
        assert_eq!(musique_hops("2__1"), None);
        assert_eq!(musique_hops("0hop__1"), None);
    }
}
