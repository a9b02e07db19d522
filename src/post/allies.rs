//! ALLIES (docs/spec.md §5; microsoft/SimXNS `ALLIES/tools.py` @0163380, `ALLIES_model`), with
//! this project's wording of the prompts and the official flow:
//!
//! - A state is `(q, queries, evidence, answer, score)`; the evidence of a query is the
//!   text of its top-N passages.
//! - Beam init: the direct answer to `q` with its direct score, and the answer over
//!   `(q, top-N passages for q)` with its score.
//! - D rounds: for every state, **Ask** for up to K sub-questions (given the state's
//!   query–evidence pairs); for each, **Retrieve** its top-N passages, **Answer** over
//!   all the state's pairs plus the new one, **Score** the answer; keep the B best new
//!   states (stable sort, so ties keep generation order); stop as soon as a kept state
//!   scores ≥ the threshold and answer with the best.
//!
//! Replies: **Answer** ends with (or is) the answer — `The answer is X` is accepted;
//! **Score** is a number in [0, 1] anywhere in the reply (the official code takes the
//! first whitespace token); **Ask** lists questions one per line, numbered or bulleted
//! (the official code cuts three characters off each line after the first). Parse
//! failures are counted: an empty answer is scored 0 without a call, an unreadable score
//! is 0, an Ask reply without questions adds no states. Where the official code crashes
//! (no new state in a round, D = 0) the best state so far answers.

use serde::Serialize;

use super::parse::{answer, probability, questions};
use super::{distinct_indices, Doc, LlmError, Outcome, Retriever, Session};

/// Search settings (paper defaults for NQ: B=2, D=2, K=2, N=2, threshold 0.8).
#[derive(Debug, Clone, PartialEq)]
pub struct AlliesConfig {
    /// B: states kept per round.
    pub beam_size: usize,
    /// D: rounds of expansion.
    pub depth: usize,
    /// K: sub-questions asked per state.
    pub sub_questions: usize,
    /// N: passages retrieved per query.
    pub top_n: usize,
    /// A kept state scoring at least this ends the search.
    pub threshold: f64,
}

/// One beam state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct State {
    pub queries: Vec<String>,
    /// The passages found for each query.
    pub evidence: Vec<Vec<Doc>>,
    pub answer: String,
    pub score: f64,
}

/// `Query: … / Passages: …` blocks, one per query–evidence pair.
fn pairs(state: &State) -> String {
    state
        .queries
        .iter()
        .zip(&state.evidence)
        .map(|(q, docs)| {
            let text: Vec<String> = docs.iter().map(Doc::render).collect();
            format!("Query: {q}\nPassages: {}", text.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn direct_answer_prompt(question: &str) -> String {
    format!(
        "Answer the question with a single entity, from your own knowledge.\n\
         Question: {question}\nThe answer is"
    )
}

fn answer_prompt(question: &str, state: &State) -> String {
    format!(
        "Below are search queries, each with the passages found for it.\n\n{}\n\n\
         Using these passages and your own knowledge, answer the question with a single \
         entity. You must give an answer; if several entities fit, give the first.\n\
         Question: {question}\nThe answer is",
        pairs(state)
    )
}

fn score_prompt(question: &str, state: &State) -> String {
    let evidence = if state.queries.is_empty() {
        String::new()
    } else {
        format!(
            "Search queries and the passages found for them:\n{}\n\n",
            pairs(state)
        )
    };
    format!(
        "Question: {question}\nCandidate answer: {}\n\n{evidence}\
         How likely is the candidate answer to be correct? Use the passages, if any, and \
         your own reasoning. Give one number between 0 and 1: below 0.3 when there is clear \
         evidence against it, 0.3 to 0.5 when it seems wrong without proof, 0.5 to 0.7 when \
         it seems right without proof, above 0.7 when there is clear evidence for it, and 0 \
         when it does not answer the question. Reply with the number only.",
        state.answer
    )
}

fn ask_prompt(question: &str, state: &State, k: usize) -> String {
    let known = if state.queries.is_empty() {
        String::new()
    } else {
        format!("What has been found so far:\n{}\n\n", pairs(state))
    };
    format!(
        "Question: {question}\n\n{known}Write at most {k} sub-questions whose answers would \
         help answer the question. Cover different aspects, most important first. Write one \
         per line, numbered \"1.\", \"2.\", and nothing else."
    )
}

/// A question's beam search.
struct Search<'r, 's, 'l> {
    question: &'r str,
    session: &'s mut Session<'l>,
}

impl Search<'_, '_, '_> {
    /// Fills in `state`'s answer (with evidence when it has pairs) and its score.
    fn answer_and_score(&mut self, mut state: State) -> Result<State, LlmError> {
        let prompt = if state.queries.is_empty() {
            direct_answer_prompt(self.question)
        } else {
            answer_prompt(self.question, &state)
        };
        let reply = self.session.ask(&prompt)?;
        state.answer = answer(&reply).unwrap_or_else(|| {
            self.session.parse_failure("allies.answer", "empty reply");
            String::new()
        });
        state.score = if state.answer.is_empty() {
            0.0
        } else {
            let reply = self.session.ask(&score_prompt(self.question, &state))?;
            probability(&reply).unwrap_or_else(|| {
                self.session
                    .parse_failure("allies.score", "no number between 0 and 1");
                0.0
            })
        };
        Ok(state)
    }
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exit {
    Threshold,
    Depth,
    NoSubQuestions,
}

/// Runs ALLIES for one question. `initial` replaces the passages retrieved for the
/// question itself (the scorer's top chain).
pub fn run(
    question: &str,
    initial: Option<Vec<Doc>>,
    retriever: &dyn Retriever,
    session: &mut Session,
    config: &AlliesConfig,
) -> Result<Outcome, LlmError> {
    let mut search = Search { question, session };
    let blank = State {
        queries: Vec::new(),
        evidence: Vec::new(),
        answer: String::new(),
        score: 0.0,
    };
    let first_docs = initial.unwrap_or_else(|| retriever.retrieve(question, config.top_n));
    let direct = search.answer_and_score(blank.clone())?;
    let grounded = search.answer_and_score(State {
        queries: vec![question.to_string()],
        evidence: vec![first_docs],
        ..blank
    })?;
    let init = vec![direct, grounded];
    let mut beam = init.clone();
    let mut rounds: Vec<Vec<State>> = Vec::new();
    let mut exit = Exit::Depth;
    for _ in 0..config.depth {
        let mut next = Vec::new();
        for state in &beam {
            let reply = search
                .session
                .ask(&ask_prompt(question, state, config.sub_questions))?;
            let subs = questions(&reply, config.sub_questions);
            if subs.is_empty() {
                search
                    .session
                    .parse_failure("allies.ask", "no sub-question in the reply");
            }
            for sub in subs {
                let mut child = state.clone();
                child.evidence.push(retriever.retrieve(&sub, config.top_n));
                child.queries.push(sub);
                next.push(search.answer_and_score(child)?);
            }
        }
        if next.is_empty() {
            exit = Exit::NoSubQuestions;
            break;
        }
        next.sort_by(|a, b| b.score.total_cmp(&a.score));
        next.truncate(config.beam_size);
        rounds.push(next.clone());
        beam = next;
        if beam.iter().any(|s| s.score >= config.threshold) {
            exit = Exit::Threshold;
            break;
        }
    }
    let best = beam
        .iter()
        .min_by(|a, b| b.score.total_cmp(&a.score)) // the first of the best
        .expect("the beam is never empty");
    Ok(Outcome {
        answer: (!best.answer.is_empty()).then(|| best.answer.clone()),
        evidence: distinct_indices(best.evidence.iter().flatten()),
        trace: serde_json::json!({ "init": init, "rounds": rounds, "exit": exit }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::post::testing::{pool, ScriptedLlm};
    use crate::post::Bm25Retriever;

    const QUESTION: &str = "Where was the founder of Alpha born?";
    const Q1: &str = "Who founded Alpha?";
    const Q2: &str = "Where was Zed Zimmer born?";

    fn llm() -> ScriptedLlm {
        ScriptedLlm::new(
            &[
                (
                    &["sub-questions"],
                    "Ranked sub-questions:\n1. Who founded Alpha?\n2. Where was Zed Zimmer born?\n3. Extra one?",
                ),
                (&["Below are search queries", "Query: Where was Zed Zimmer born?"], "The answer is Quebec."),
                (&["Below are search queries", "Query: Who founded Alpha?"], "Montreal"),
                (&["Below are search queries"], "Nice"),
                (&["Candidate answer: Quebec"], "0.9"),
                (&["Candidate answer: Montreal"], "Score: 0.6"),
                (&["Candidate answer: Nice"], "0.5"),
                (&["Candidate answer: Lyon"], "0.2 (weak)"),
                (&["single entity, from your own knowledge"], "Lyon"),
            ],
            "unexpected prompt",
        )
    }

    fn config(threshold: f64) -> AlliesConfig {
        AlliesConfig {
            beam_size: 2,
            depth: 2,
            sub_questions: 2,
            top_n: 1,
            threshold,
        }
    }

    fn run_with<'l>(llm: &'l ScriptedLlm, config: &AlliesConfig) -> (Outcome, Session<'l>) {
        let passages = pool(&[
            ("Alpha", "Alpha is a rock band founded by Zed Zimmer."),
            ("Bravo", "Bravo is a river town with a harbour."),
            ("Zed Zimmer", "Zed Zimmer was born in Quebec."),
        ]);
        let retriever = Bm25Retriever::pool(&passages);
        let mut session = Session::new(llm);
        let out = run(QUESTION, None, &retriever, &mut session, config).unwrap();
        (out, session)
    }

    fn summary(states: &serde_json::Value) -> Vec<(Vec<String>, String, f64)> {
        states
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    serde_json::from_value(s["queries"].clone()).unwrap(),
                    s["answer"].as_str().unwrap().to_string(),
                    s["score"].as_f64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn stops_when_a_kept_state_reaches_the_threshold() {
        let llm = llm();
        let (out, session) = run_with(&llm, &config(0.8));
        let q = QUESTION.to_string();
        assert_eq!(
            summary(&out.trace["init"]),
            [(vec![], "Lyon".into(), 0.2), (vec![q], "Nice".into(), 0.5)]
        );
        // Four children (2 states × K=2; the third listed question is over K), trimmed
        // to B=2: the two Quebec states in generation order.
        assert_eq!(
            summary(&out.trace["rounds"][0]),
            [
                (vec![Q2.into()], "Quebec".into(), 0.9),
                (vec![QUESTION.into(), Q2.into()], "Quebec".into(), 0.9)
            ]
        );
        assert_eq!(out.trace["rounds"].as_array().unwrap().len(), 1);
        assert_eq!(out.trace["exit"], "threshold");
        assert_eq!(out.answer.as_deref(), Some("Quebec"));
        assert_eq!(out.evidence, [2]);
        // 2 + 2 (init) + 2 asks + 4 × (answer + score).
        assert_eq!(session.stats.llm_calls, 14);
        assert!(session.parse_failures.is_empty());
    }

    #[test]
    fn runs_every_round_below_the_threshold() {
        let llm = llm();
        let (out, session) = run_with(&llm, &config(0.95));
        assert_eq!(out.trace["exit"], "depth");
        let last = summary(&out.trace["rounds"][1]);
        assert_eq!(last.len(), 2);
        assert_eq!(last[0], (vec![Q2.into(), Q1.into()], "Quebec".into(), 0.9));
        assert_eq!(out.evidence, [2, 0]);
        assert_eq!(session.stats.llm_calls, 24);
    }

    #[test]
    fn unreadable_replies_are_counted_and_survived() {
        let llm = ScriptedLlm::new(
            &[
                (&["sub-questions"], "No."),
                (&["Below are search queries"], "  "),
                (&["Candidate answer"], "very likely"),
                (&["single entity, from your own knowledge"], "Lyon"),
            ],
            "unexpected prompt",
        );
        let (out, session) = run_with(&llm, &config(0.8));
        assert_eq!(out.trace["exit"], "no-sub-questions");
        assert_eq!(out.answer.as_deref(), Some("Lyon"));
        assert!(out.evidence.is_empty());
        // Direct answer and score, grounded answer (empty: not scored), two asks.
        assert_eq!(session.stats.llm_calls, 5);
        assert_eq!(
            session.parse_failures,
            [
                "allies.score: no number between 0 and 1",
                "allies.answer: empty reply",
                "allies.ask: no sub-question in the reply",
                "allies.ask: no sub-question in the reply",
            ]
        );
    }

    #[test]
    fn depth_zero_answers_from_the_initial_beam() {
        let llm = llm();
        let mut c = config(0.8);
        c.depth = 0;
        let (out, session) = run_with(&llm, &c);
        assert_eq!(out.answer.as_deref(), Some("Nice"));
        assert_eq!(session.stats.llm_calls, 4);
    }
}
