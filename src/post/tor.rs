//! Tree of Reviews (docs/spec.md §4; seed 000, Li et al. 2024 — no public code; the prompts are
//! this project's wording of the paper's Tables 7, 8, 9 and 12).
//!
//! The root is the question; every other node is one passage. Each node's *review* reads
//! the passages on the root→node path and answers three steps, which the parser reads
//! from these tags (matched in any case, with or without brackets):
//!
//! | step | tags |
//! |---|---|
//! | relevance | `[RELEVANT]` / `[IRRELEVANT]` |
//! | support | `[SUPPORTED]` / `[UNSUPPORTED]` |
//! | action | `[ANSWER] <answer>` / `[QUERY] <search query>` |
//!
//! IRRELEVANT rejects the node (relevance pruning); RELEVANT + SUPPORTED accepts it: the
//! path's passages and the `[ANSWER]` text (the "brief analysis") join the evidence
//! pool; RELEVANT + UNSUPPORTED retrieves with a new query and expands one child per
//! passage found (not already on the path), unless the node is at the maximum depth.
//! Repetitive pruning drops retrieved passages that are already in the evidence pool.
//! The new query is the `[QUERY]` text (`cot`, `direct`) or, with `mpc` expansion, the
//! `[INFO]` passage the model writes for what is missing (Table 9). Nodes are reviewed
//! depth-first. Finally the evidence-based fusion prompt (Table 12) answers from every
//! (analysis, passages) pair; its reply ends with `The answer is <answer>`.
//!
//! Fallbacks (each counted as a parse failure): a review without any tag rejects its
//! node; RELEVANT + SUPPORTED without `[ANSWER]` is accepted with an empty analysis;
//! missing judgements are inferred from the action (`[ANSWER]` → relevant and supported,
//! `[QUERY]` → relevant, unsupported); an MPC reply without `[INFO]` falls back to the
//! review's `[QUERY]`; a fusion reply without `The answer is` gives its first line.

use serde::Serialize;

use super::parse::{after_tag, answer, choice, Choice};
use super::{distinct_indices, numbered, Doc, LlmError, Outcome, Retriever, Session};

/// How a new query is made for an unsupported path (paper Table 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Expansion {
    /// Review without reasoning lines (Table 8); the query is its `[QUERY]`.
    Direct,
    /// Review with a reason before each judgement (Table 7); the query is its `[QUERY]`.
    Cot,
    /// CoT review, then the model writes the missing passage (Table 9), used as the query.
    Mpc,
}

/// Search settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TorConfig {
    /// Children per node at each depth: `widths[0]` passages under the root, … The tree
    /// depth is `widths.len()` (paper: 5,3,3).
    pub widths: Vec<usize>,
    pub expansion: Expansion,
    /// Reject IRRELEVANT nodes (off: they are expanded like unsupported ones).
    pub relevance_pruning: bool,
    /// Drop retrieved passages already in the evidence pool.
    pub repetitive_pruning: bool,
}

/// What a review reply says.
#[derive(Debug, Clone, PartialEq)]
struct Review {
    relevant: bool,
    supported: bool,
    answer: Option<String>,
    query: Option<String>,
}

/// What happened at a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Relevant and supported: the path is evidence.
    Accepted,
    /// Irrelevant (relevance pruning).
    Rejected,
    /// Unsupported: children were retrieved with `query`.
    Expanded,
    /// Unsupported at the maximum depth.
    DepthLimit,
    /// Unsupported, but the reply gave no query.
    NoQuery,
    /// The review reply held no tag at all.
    Unparsed,
}

/// A node of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub doc: usize,
    pub title: String,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Retrieved passages dropped because they were already evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
}

/// One accepted path.
#[derive(Debug, Clone, PartialEq)]
struct Evidence {
    docs: Vec<Doc>,
    analysis: String,
}

/// The review prompt for `question` over the passages of a root→node path.
pub fn review_prompt(question: &str, path: &[Doc], reasons: bool) -> String {
    let (r1, r2) = if reasons {
        (
            "Relevance: <a short reason> [RELEVANT] or [IRRELEVANT]",
            "Support: <the reasoning path if everything is there, else what is missing> [SUPPORTED] or [UNSUPPORTED]",
        )
    } else {
        (
            "Relevance: [RELEVANT] or [IRRELEVANT]",
            "Support: [SUPPORTED] or [UNSUPPORTED]",
        )
    };
    format!(
        "You check whether some passages are enough to answer a multi-hop question. Read \
         the passages as one body of evidence.\n\n\
         Question: {question}\n\nPassages:\n{}\n\n\
         Work in three steps and write one line for each.\n\
         1. Relevance: write [RELEVANT] if the passages hold any fact that brings the answer \
         closer, and [IRRELEVANT] only if they hold nothing useful.\n\
         2. Support: write [SUPPORTED] if the passages together give every fact the answer \
         needs, and [UNSUPPORTED] if anything is missing.\n\
         3. Action: if supported, write [ANSWER] followed by the answer in a few words; \
         otherwise write [QUERY] followed by a search query for the missing fact.\n\n\
         Reply in this format:\n{r1}\n{r2}\nAction: [ANSWER] <answer> or [QUERY] <query>",
        numbered(path)
    )
}

/// The missing-paragraph-completion prompt (MPC expansion).
pub fn mpc_prompt(question: &str, path: &[Doc]) -> String {
    format!(
        "The passages below do not hold everything needed to answer the question.\n\n\
         Question: {question}\n\nPassages:\n{}\n\n\
         1. Work out which fact is missing and write it from your own knowledge as a short \
         encyclopedia-style paragraph, on one line that starts with [INFO].\n\
         2. Answer the question from the passages and your paragraph, on one line that \
         starts with [ANSWER].",
        numbered(path)
    )
}

/// The evidence-based fusion prompt.
fn fusion_prompt(question: &str, evidence: &[Evidence]) -> String {
    let body = if evidence.is_empty() {
        "(no evidence was found; answer from your own knowledge)".to_string()
    } else {
        evidence
            .iter()
            .enumerate()
            .map(|(i, e)| {
                format!(
                    "Evidence {}\nAssertion: {}\nPassages:\n{}",
                    i + 1,
                    e.analysis,
                    numbered(&e.docs)
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    format!(
        "Answer the question from the evidence below. Each piece of evidence is an assertion \
         about the question with the passages that support it. Assertions may disagree: weigh \
         them against their passages and your own knowledge.\n\n{body}\n\n\
         Question: {question}\n\
         You may reason in a few sentences; end with the line \"The answer is <answer>.\", the \
         answer in as few words as possible."
    )
}

/// Reads a review reply: the review, and whether a judgement was missing and inferred
/// from the action; `Err` says why the reply holds no review (no tag at all, or both
/// tags of a judgement, as when the format line is echoed back).
fn parse_review(text: &str) -> Result<(Review, bool), &'static str> {
    let answer = after_tag(text, "ANSWER");
    let query = after_tag(text, "QUERY");
    let judgement = |yes, no| match choice(text, yes, no) {
        Choice::Yes => Ok(Some(true)),
        Choice::No => Ok(Some(false)),
        Choice::Neither => Ok(None),
        Choice::Both => Err("both tags of a judgement (the format line echoed?)"),
    };
    let relevant = judgement("RELEVANT", "IRRELEVANT")?;
    let supported = judgement("SUPPORTED", "UNSUPPORTED")?;
    if relevant.is_none() && supported.is_none() && answer.is_none() && query.is_none() {
        return Err("no relevance, support or action tag");
    }
    let acts = answer.is_some() || query.is_some();
    let inferred = relevant.is_none() || supported.is_none();
    let review = Review {
        relevant: relevant.unwrap_or(acts),
        supported: supported.unwrap_or(answer.is_some() && query.is_none()),
        answer,
        query,
    };
    Ok((review, inferred))
}

/// The depth-first search of one question.
struct Search<'r, 's, 'l> {
    question: &'r str,
    retriever: &'r dyn Retriever,
    session: &'s mut Session<'l>,
    config: &'r TorConfig,
    evidence: Vec<Evidence>,
}

impl Search<'_, '_, '_> {
    fn in_pool(&self, index: usize) -> bool {
        self.evidence
            .iter()
            .any(|e| e.docs.iter().any(|d| d.index == index))
    }

    /// Reviews the last node of `path` and, when it is expanded, its subtree.
    fn visit(&mut self, path: &mut Vec<Doc>) -> Result<Node, LlmError> {
        let doc = path.last().expect("a node has a passage").clone();
        let mut node = Node {
            doc: doc.index,
            title: doc.title,
            verdict: Verdict::Unparsed,
            analysis: None,
            query: None,
            pruned: Vec::new(),
            children: Vec::new(),
        };
        let reasons = self.config.expansion != Expansion::Direct;
        let reply = self
            .session
            .ask(&review_prompt(self.question, path, reasons))?;
        let (review, inferred) = match parse_review(&reply) {
            Ok(parsed) => parsed,
            Err(why) => {
                self.session.parse_failure("tor.review", why);
                return Ok(node);
            }
        };
        if inferred {
            self.session.parse_failure(
                "tor.review",
                "a relevance or support judgement is missing (inferred from the action)",
            );
        }
        if !review.relevant && self.config.relevance_pruning {
            node.verdict = Verdict::Rejected;
            return Ok(node);
        }
        if review.relevant && review.supported {
            let analysis = review.answer.unwrap_or_else(|| {
                self.session
                    .parse_failure("tor.review", "[SUPPORTED] without an [ANSWER]");
                String::new()
            });
            node.verdict = Verdict::Accepted;
            node.analysis = Some(analysis.clone());
            self.evidence.push(Evidence {
                docs: path.clone(),
                analysis,
            });
            return Ok(node);
        }
        let depth = path.len();
        if depth >= self.config.widths.len() {
            node.verdict = Verdict::DepthLimit;
            return Ok(node);
        }
        let query = match self.config.expansion {
            Expansion::Mpc => {
                let info = after_tag(&self.session.ask(&mpc_prompt(self.question, path))?, "INFO");
                if info.is_none() {
                    self.session.parse_failure("tor.mpc", "no [INFO] paragraph");
                }
                info.or(review.query)
            }
            Expansion::Direct | Expansion::Cot => review.query,
        };
        let Some(query) = query else {
            self.session
                .parse_failure("tor.review", "[UNSUPPORTED] without a [QUERY]");
            node.verdict = Verdict::NoQuery;
            return Ok(node);
        };
        let width = self.config.widths[depth];
        let children: Vec<Doc> = self
            .retriever
            .retrieve(&query, width + path.len())
            .into_iter()
            .filter(|d| path.iter().all(|p| p.index != d.index))
            .take(width)
            .collect();
        node.verdict = Verdict::Expanded;
        node.query = Some(query);
        for child in children {
            if self.config.repetitive_pruning && self.in_pool(child.index) {
                node.pruned.push(child.index);
                continue;
            }
            path.push(child);
            node.children.push(self.visit(path)?);
            path.pop();
        }
        Ok(node)
    }
}

/// Runs Tree of Reviews for one question. `initial` replaces the root's retrieval (the
/// scorer's top chain); otherwise the root's children are the `widths[0]` best passages
/// for the question.
pub fn run(
    question: &str,
    initial: Option<Vec<Doc>>,
    retriever: &dyn Retriever,
    session: &mut Session,
    config: &TorConfig,
) -> Result<Outcome, LlmError> {
    let roots = initial.unwrap_or_else(|| {
        retriever.retrieve(question, config.widths.first().copied().unwrap_or(0))
    });
    let mut search = Search {
        question,
        retriever,
        session,
        config,
        evidence: Vec::new(),
    };
    let mut tree = Vec::with_capacity(roots.len());
    for doc in roots {
        tree.push(search.visit(&mut vec![doc])?);
    }
    let reply = search
        .session
        .ask(&fusion_prompt(question, &search.evidence))?;
    if !reply.to_lowercase().contains("the answer is") {
        search
            .session
            .parse_failure("tor.fusion", "no \"The answer is\" sentence");
    }
    Ok(Outcome {
        answer: answer(&reply),
        evidence: distinct_indices(search.evidence.iter().flat_map(|e| &e.docs)),
        trace: serde_json::json!({ "tree": tree, "evidence_pool": search.evidence.len() }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::post::testing::{pool, ScriptedLlm};
    use crate::post::Bm25Retriever;

    const QUESTION: &str = "Where was the founder of Alpha born?";
    const REVIEW: &str = "Work in three steps";

    fn passages() -> Vec<crate::io::questions::Passage> {
        pool(&[
            ("Alpha", "Alpha is a rock band founded by Zed Zimmer."),
            ("Bravo", "Bravo is a river town with a harbour."),
            ("Zed Zimmer", "Zed Zimmer was born in Quebec."),
            (
                "Zimmer Hall",
                "Zimmer Hall is a large concert building in the old harbour district.",
            ),
            (
                "Hall History",
                "The hall history goes back to an old market.",
            ),
        ])
    }

    /// Replies of a model that accepts [Alpha, Zed Zimmer], rejects Bravo and keeps
    /// asking below Zimmer Hall.
    fn tree_llm() -> ScriptedLlm {
        ScriptedLlm::new(
            &[
                (
                    &[REVIEW, "[2] Zed Zimmer:"],
                    "Relevance: founder and birthplace [RELEVANT]\nSupport: Alpha was founded by \
                     Zed Zimmer, born in Quebec [SUPPORTED]\nAction: [ANSWER] Quebec",
                ),
                (
                    &[REVIEW, "[3] Hall History:"],
                    "Relevance: [RELEVANT]\nSupport: [UNSUPPORTED]\nAction: [QUERY] market founder",
                ),
                (
                    &[REVIEW, "[2] Zimmer Hall:"],
                    "Relevance: a Zimmer [RELEVANT]\nSupport: no birthplace [UNSUPPORTED]\n\
                     Action: [QUERY] quebec hall history",
                ),
                (
                    &[REVIEW, "[1] Alpha:"],
                    "Relevance: names the founder [RELEVANT]\nSupport: birthplace missing \
                     [UNSUPPORTED]\nAction: [QUERY] zimmer birthplace",
                ),
                (
                    &[REVIEW, "[1] Bravo:"],
                    "Relevance: not relevant to the band [IRRELEVANT]\nSupport: [UNSUPPORTED]\n\
                     Action: [QUERY] alpha",
                ),
                (
                    &["Each piece of evidence", "Assertion: Quebec"],
                    "Zed Zimmer founded Alpha and was born in Quebec.\nThe answer is Quebec.",
                ),
            ],
            "unexpected prompt",
        )
    }

    fn config(widths: &[usize], expansion: Expansion) -> TorConfig {
        TorConfig {
            widths: widths.to_vec(),
            expansion,
            relevance_pruning: true,
            repetitive_pruning: true,
        }
    }

    fn run_with(
        llm: &ScriptedLlm,
        initial: &[usize],
        config: &TorConfig,
    ) -> (Outcome, crate::post::CallStats, Vec<String>) {
        let passages = passages();
        let retriever = Bm25Retriever::pool(&passages);
        let initial = initial.iter().map(|&i| retriever.doc(i).unwrap()).collect();
        let mut session = Session::new(llm);
        let out = run(QUESTION, Some(initial), &retriever, &mut session, config).unwrap();
        (out, session.stats, session.parse_failures)
    }

    #[test]
    fn prunes_accepts_and_stops_at_the_depth_limit() {
        let llm = tree_llm();
        let (out, stats, failures) = run_with(&llm, &[0, 1], &config(&[2, 2, 2], Expansion::Cot));
        assert_eq!(out.answer.as_deref(), Some("Quebec"));
        assert_eq!(out.evidence, [0, 2]);
        let expected = serde_json::json!({
            "tree": [
                {"doc": 0, "title": "Alpha", "verdict": "expanded", "query": "zimmer birthplace",
                 "children": [
                    {"doc": 2, "title": "Zed Zimmer", "verdict": "accepted", "analysis": "Quebec"},
                    {"doc": 3, "title": "Zimmer Hall", "verdict": "expanded",
                     "query": "quebec hall history", "pruned": [2],
                     "children": [{"doc": 4, "title": "Hall History", "verdict": "depth-limit"}]}
                 ]},
                {"doc": 1, "title": "Bravo", "verdict": "rejected"}
            ],
            "evidence_pool": 1
        });
        assert_eq!(out.trace, expected);
        // Five reviews and the fusion; the depth-3 node asks for no retrieval.
        assert_eq!((stats.llm_calls, llm.calls()), (6, 6));
        assert_eq!((stats.prompt_tokens, stats.completion_tokens), (60, 12));
        assert!(failures.is_empty(), "{failures:?}");
        let prompts = llm.prompts.lock().unwrap();
        let fusion = prompts.last().unwrap();
        assert!(fusion.contains("Evidence 1\nAssertion: Quebec\nPassages:\n[1] Alpha: "));
        assert!(!fusion.contains("Evidence 2"));
    }

    #[test]
    fn ablations_review_more_nodes() {
        let llm = tree_llm();
        let mut c = config(&[2, 2, 2], Expansion::Cot);
        c.repetitive_pruning = false;
        let (out, stats, _) = run_with(&llm, &[0, 1], &c);
        // Zed Zimmer is reviewed again under Zimmer Hall (at depth 3: depth limit).
        assert_eq!(stats.llm_calls, 7);
        let below_hall = &out.trace["tree"][0]["children"][1]["children"];
        assert_eq!(
            (&below_hall[0]["doc"], &below_hall[1]["doc"]),
            (&4.into(), &2.into())
        );
        assert_eq!(out.evidence, [0, 2]);

        let llm = tree_llm();
        let mut c = config(&[2, 2], Expansion::Cot);
        c.relevance_pruning = false;
        let (out, stats, _) = run_with(&llm, &[1], &c);
        // Bravo is expanded with its query "alpha": [Bravo, Alpha] is still irrelevant
        // and at the depth limit; nothing is accepted.
        assert_eq!(out.trace["tree"][0]["verdict"], "expanded");
        assert_eq!(
            out.trace["tree"][0]["children"][0]["verdict"],
            "depth-limit"
        );
        assert_eq!(stats.llm_calls, 3);
        assert!(out.evidence.is_empty());
    }

    #[test]
    fn mpc_queries_and_parse_failures() {
        let llm = ScriptedLlm::new(
            &[
                (
                    &["starts with [INFO]"],
                    "Thought: the birthplace.\n[INFO] Zed Zimmer was born in Quebec.\n[ANSWER] Quebec",
                ),
                (&[REVIEW, "[2] Zed Zimmer:"], "lorem ipsum dolor"),
                (&[REVIEW, "[1] Alpha:"], "Action: [QUERY] who founded it"),
                (&["(no evidence was found"], "I am not sure.\nMaybe Paris."),
            ],
            "unexpected prompt",
        );
        let (out, stats, failures) = run_with(&llm, &[0], &config(&[1, 1], Expansion::Mpc));
        let root = &out.trace["tree"][0];
        assert_eq!(root["query"], "Zed Zimmer was born in Quebec");
        assert_eq!(root["children"][0]["doc"], 2);
        assert_eq!(root["children"][0]["verdict"], "unparsed");
        assert_eq!(stats.llm_calls, 4);
        assert_eq!(
            failures,
            [
                "tor.review: a relevance or support judgement is missing (inferred from the action)",
                "tor.review: no relevance, support or action tag",
                "tor.fusion: no \"The answer is\" sentence",
            ]
        );
        assert_eq!(out.answer.as_deref(), Some("I am not sure"));
        assert!(out.evidence.is_empty());
    }

    #[test]
    fn review_replies_parse_tolerantly() {
        let (r, inferred) =
            parse_review("relevance: [relevant]\nsupport: [supported]\n[answer]: 1997.").unwrap();
        assert_eq!(
            (r.relevant, r.supported, r.answer.as_deref(), inferred),
            (true, true, Some("1997"), false)
        );
        let (r, inferred) = parse_review("**[ANSWER]** Paris").unwrap();
        assert_eq!((r.relevant, r.supported, inferred), (true, true, true));
        assert_eq!(
            parse_review("I don't know").unwrap_err(),
            "no relevance, support or action tag"
        );
        // The instruction copied back, as SmolLM2 served by llama.cpp did for all 6
        // nodes it "accepted" before: no verdict, whatever the action line holds.
        let echoed = "Relevance: <a short reason> [RELEVANT] or [IRRELEVANT]\n\
                      Support: [SUPPORTED] or [UNSUPPORTED]\n[ANSWER] <the answer>";
        assert!(parse_review(echoed).unwrap_err().contains("both tags"));
        let half = "[RELEVANT]\nSupport: [SUPPORTED] or [UNSUPPORTED]\n[ANSWER] Paris";
        assert!(parse_review(half).is_err());
    }
}
