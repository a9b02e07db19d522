//! LEPUS / PromptRank (docs/spec.md §3; mukhal/PromptRank @26831e6, `src/promptrank.py`,
//! `src/prompt_utils.py`) as a state machine over one question's candidate pool.
//!
//! A document's relevance is the mean log-probability of the question's tokens
//! given a prompt built from a path of documents and an instruction template:
//! `Document: d1 Document: d2  <instruction> Question: <question>`. The search has two
//! steps (H = 2):
//!
//! 1. every candidate is scored as a single-document prompt, under every template;
//! 2. the `first_hops` (K1) best candidates are each expanded by their precomputed
//!    second-hop candidates (at most K2; the caller ranks them, by TF-IDF cosine to
//!    the question in the official code), and every path `[d1, d2]` is scored.
//!
//! A template's score is combined over the templates by [`Ensemble`] (the official
//! code applies `--ensembling_method` to single documents and always the mean to
//! paths; both are options here). A document's final score is the maximum of its
//! single-document score and the scores of every path that contains it; documents
//! are ranked by it, ties in passage order (Python's stable sort over the pool
//! order).
//!
//! Model inputs: the prompt and the question are encoded by a [`PromptEncoder`]; in
//! the emitted [`Sequence`], `type_ids[t] = 1` marks the question tokens whose
//! log-probabilities are scored and 0 the prompt. The scorer returns, per sequence,
//! the log-probabilities of the tokens marked 1 (their mean is the prompt's score).

use std::sync::Arc;

use crate::model::batch::Sequence;

/// How scores under several templates are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Ensemble {
    Mean,
    Max,
}

impl Ensemble {
    fn combine(self, scores: &[f32]) -> f32 {
        match self {
            Ensemble::Mean => scores.iter().sum::<f32>() / scores.len() as f32,
            Ensemble::Max => scores.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        }
    }
}

/// Search settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LepusConfig {
    /// K1: single-document winners expanded into paths.
    pub first_hops: usize,
    /// Ensemble over templates of single-document scores.
    pub ensemble: Ensemble,
    /// Ensemble over templates of path scores (the official code: always the mean).
    pub path_ensemble: Ensemble,
}

/// Turns a prompt and the question into a model input.
pub trait PromptEncoder: Send + Sync {
    /// `prompt.trim() + " " + question`, with `type_ids` 1 on the question tokens that
    /// are scored (at least one) and 0 elsewhere; or why it cannot be scored.
    fn encode(&self, prompt: &str, question: &str) -> Result<Sequence, String>;
}

impl PromptEncoder for crate::text::prompt::LmEncoder {
    fn encode(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
        crate::text::prompt::LmEncoder::encode(self, prompt, question)
    }
}

/// The instruction set shipped with hopscore (own wording; see the file's header).
pub const DEFAULT_INSTRUCTIONS: &str = include_str!("lepus_instructions.txt");

/// Where an instruction goes relative to the documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum InstructionPosition {
    /// `Document: <P> {instruction} Question:` (better in the paper, Fig. 3).
    After,
    /// `{instruction} Document: <P> Question:`.
    Before,
}

/// A prompt template: its text holds `<P>` where the documents go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub String);

/// Every template of an instruction file: one per non-blank line not starting with
/// `#`; a line holding `<P>` is a template as it is, any other line an instruction
/// placed at `position`.
pub fn instruction_templates(text: &str, position: InstructionPosition) -> Vec<Template> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            Template(if l.contains("<P>") {
                l.to_string()
            } else {
                match position {
                    InstructionPosition::After => format!("Document: <P> {l} Question:"),
                    InstructionPosition::Before => format!("{l} Document: <P> Question:"),
                }
            })
        })
        .collect()
}

/// The first `n` templates of an instruction file ([`instruction_templates`]).
pub fn parse_templates(
    text: &str,
    position: InstructionPosition,
    n: usize,
) -> Result<Vec<Template>, String> {
    let all = instruction_templates(text, position);
    if n == 0 || n > all.len() {
        return Err(format!(
            "--num-templates {n}: the instruction set has {} templates",
            all.len()
        ));
    }
    Ok(all.into_iter().take(n).collect())
}

impl Template {
    /// The prompt of a path, as the official `create_prompt`: each document `p`
    /// replaces `<P>` by `"{p} {prefix} <P>"`, then `"{prefix} <P>"` is removed, where
    /// the prefix is `Document:` or `Passage:` when the template mentions it
    /// (case-insensitive), else empty. Blank documents are skipped.
    pub fn render(&self, docs: &[&str]) -> String {
        let lower = self.0.to_lowercase();
        let prefix = if lower.contains("document:") {
            "Document:"
        } else if lower.contains("passage:") {
            "Passage:"
        } else {
            ""
        };
        let mut t = self.0.clone();
        for p in docs.iter().filter(|p| !p.trim().is_empty()) {
            t = t.replace("<P>", &format!("{p} {prefix} <P>"));
        }
        t.replace(&format!("{prefix} <P>"), "")
    }
}

/// An in-context demonstration, as a record of the official demos file (a JSON list):
/// a question and the texts of its gold path, in hop order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Demo {
    pub question: String,
    pub gold_path_texts: Vec<String>,
}

/// The templates with in-context demonstrations before them, as the official `run.py`
/// builds them: a demonstration is the template rendered on its gold path, a space and
/// its question as written (`create_prompt(gold_path_texts, template) + " " +
/// question`); a set's demonstrations, joined by spaces, go before the template
/// (`" ".join(examples) + " " + template`). One template per set and template, set by
/// set: with several sets their scores are combined as the templates' are (the
/// official ensemble of demonstration sets).
pub fn with_demos(templates: &[Template], sets: &[Vec<Demo>]) -> Vec<Template> {
    sets.iter()
        .flat_map(|set| {
            templates.iter().map(move |t| {
                let mut text: Vec<String> = set
                    .iter()
                    .map(|d| {
                        let docs: Vec<&str> =
                            d.gold_path_texts.iter().map(String::as_str).collect();
                        format!("{} {}", t.render(&docs), d.question)
                    })
                    .collect();
                text.push(t.0.clone());
                Template(text.join(" "))
            })
        })
        .collect()
}

/// A question with `?` appended when it does not end with one.
pub fn question_text(question: &str) -> String {
    if question.ends_with('?') {
        question.to_string()
    } else {
        format!("{question}?")
    }
}

/// A scored path of documents.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPath {
    /// Passage indices in prompt order.
    pub chain: Vec<usize>,
    pub score: f32,
}

/// What the search found for one question.
#[derive(Debug, Clone, PartialEq)]
pub struct LepusResult {
    /// Scored passages, best first.
    pub ranking: Vec<usize>,
    /// Their final scores (aligned with `ranking`).
    pub doc_scores: Vec<f32>,
    /// Every scored two-document path, best first (ties in scoring order).
    pub top_paths: Vec<ScoredPath>,
    /// Single-document score of each passage, in passage order (`None`: blank text).
    pub single_scores: Vec<Option<f32>>,
}

impl LepusResult {
    /// The best path: the top two-document path, or the best single document when no
    /// path was scored (a pool of one).
    pub fn best_path(&self) -> Option<ScoredPath> {
        self.top_paths.first().cloned().or_else(|| {
            self.ranking.first().map(|&d| ScoredPath {
                chain: vec![d],
                score: self.doc_scores[0],
            })
        })
    }
}

/// One prompt of the current step.
#[derive(Debug, Clone)]
struct Pending {
    path: Vec<usize>,
    template: usize,
    seq: Sequence,
}

/// Search state of one question.
pub struct LepusSearch {
    question: String,
    /// Rendered documents (truncated, titled); `None` for blank passages.
    docs: Vec<Option<String>>,
    /// Per passage, its second-hop candidates, best first (at most K2).
    expansions: Vec<Vec<usize>>,
    templates: Arc<[Template]>,
    config: LepusConfig,
    encoder: Arc<dyn PromptEncoder>,
    /// Requests of the current step: one per (path, template), templates innermost.
    pending: Vec<Pending>,
    single: Vec<Option<f32>>,
    result: Option<Result<LepusResult, String>>,
}

impl LepusSearch {
    /// Starts a search. `docs[j]` is passage `j` as it appears in prompts (`None`:
    /// not a candidate); `expansions[j]` its second-hop candidates, best first.
    pub fn new(
        question: &str,
        docs: Vec<Option<String>>,
        expansions: Vec<Vec<usize>>,
        templates: Arc<[Template]>,
        config: LepusConfig,
        encoder: Arc<dyn PromptEncoder>,
    ) -> Self {
        assert!(!templates.is_empty(), "at least one template");
        assert_eq!(
            docs.len(),
            expansions.len(),
            "one expansion list per passage"
        );
        let n = docs.len();
        let mut s = Self {
            question: question_text(question),
            docs,
            expansions,
            templates,
            config,
            encoder,
            pending: Vec::new(),
            single: vec![None; n],
            result: None,
        };
        let paths: Vec<Vec<usize>> = (0..n)
            .filter(|&j| s.docs[j].is_some())
            .map(|j| vec![j])
            .collect();
        if paths.is_empty() {
            s.result = Some(Ok(s.rank(&[])));
        } else {
            s.queue(paths);
        }
        s
    }

    /// The prompt of `path` under template `t` (what is scored, before the question).
    pub fn prompt(&self, path: &[usize], t: usize) -> String {
        let docs: Vec<&str> = path
            .iter()
            .map(|&j| self.docs[j].as_deref().expect("paths hold candidates only"))
            .collect();
        self.templates[t].render(&docs)
    }

    /// The texts scored by the pending requests, in request order:
    /// `prompt.trim() + " " + question` (before the encoder's length cut).
    pub fn pending_texts(&self) -> Vec<String> {
        self.pending
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    self.prompt(&p.path, p.template).trim(),
                    self.question
                )
            })
            .collect()
    }

    /// Encodes every (path, template) prompt of the next step, or ends the search
    /// with the encoder's error.
    fn queue(&mut self, paths: Vec<Vec<usize>>) {
        let mut pending = Vec::with_capacity(paths.len() * self.templates.len());
        for path in paths {
            for t in 0..self.templates.len() {
                match self.encoder.encode(&self.prompt(&path, t), &self.question) {
                    Ok(seq) => pending.push(Pending {
                        path: path.clone(),
                        template: t,
                        seq,
                    }),
                    Err(e) => {
                        self.result = Some(Err(format!("passages {path:?}: {e}")));
                        return;
                    }
                }
            }
        }
        if let Some(t) = self.cut_to_one_prompt(&pending) {
            self.result = Some(Err(format!(
                "every passage's prompt under template {t} is the same once cut to the \
                 prompt budget (the demonstrations and instruction fill it; the cut removed \
                 the passages), so every passage would score the same; raise \
                 --demo-max-prompt-tokens (--max-prompt-tokens without demonstrations) or \
                 pass --truncate-demos"
            )));
            return;
        }
        self.pending = pending;
    }

    /// A template whose prompts differ in text but are one sequence once encoded: the
    /// length cut left nothing of what tells the paths apart.
    fn cut_to_one_prompt(&self, pending: &[Pending]) -> Option<usize> {
        let t = self.templates.len();
        (0..t).find(|&k| {
            let of_template = || pending.iter().skip(k).step_by(t);
            let texts: std::collections::HashSet<String> = of_template()
                .map(|p| self.prompt(&p.path, p.template))
                .collect();
            texts.len() > 1 && of_template().all(|p| p.seq.ids == pending[k].seq.ids)
        })
    }

    /// Per path of the current step (in order), its score over the templates.
    fn path_scores(&self, logprobs: &[Vec<f32>], ensemble: Ensemble) -> Vec<(Vec<usize>, f32)> {
        let t = self.templates.len();
        self.pending
            .chunks(t)
            .zip(logprobs.chunks(t))
            .map(|(prompts, lps)| {
                let per_template: Vec<f32> = lps.iter().map(|lp| mean(lp)).collect();
                (prompts[0].path.clone(), ensemble.combine(&per_template))
            })
            .collect()
    }

    /// Final ranking from the single-document scores and the scored paths.
    fn rank(&self, paths: &[(Vec<usize>, f32)]) -> LepusResult {
        let mut score = self.single.clone();
        for (path, s) in paths {
            for &d in path {
                let cur = score[d].get_or_insert(*s);
                *cur = cur.max(*s);
            }
        }
        let mut ranking: Vec<usize> = (0..score.len()).filter(|&d| score[d].is_some()).collect();
        // Stable: ties keep passage order.
        ranking.sort_by(|&a, &b| score[b].unwrap().total_cmp(&score[a].unwrap()));
        let mut top_paths: Vec<ScoredPath> = paths
            .iter()
            .map(|(chain, score)| ScoredPath {
                chain: chain.clone(),
                score: *score,
            })
            .collect();
        top_paths.sort_by(|a, b| b.score.total_cmp(&a.score));
        LepusResult {
            doc_scores: ranking.iter().map(|&d| score[d].unwrap()).collect(),
            ranking,
            top_paths,
            single_scores: self.single.clone(),
        }
    }

    /// Feeds the question-token log-probabilities of the pending requests (in the
    /// order of [`super::Strategy::requests`]) and moves to the next step or finishes.
    pub fn feed(&mut self, logprobs: &[Vec<f32>]) {
        assert_eq!(logprobs.len(), self.pending.len(), "one result per request");
        assert!(self.result.is_none(), "search already finished");
        let single_step = self.pending.first().is_some_and(|p| p.path.len() == 1);
        if !single_step {
            let paths = self.path_scores(logprobs, self.config.path_ensemble);
            self.pending.clear();
            self.result = Some(Ok(self.rank(&paths)));
            return;
        }
        for (path, s) in self.path_scores(logprobs, self.config.ensemble) {
            self.single[path[0]] = Some(s);
        }
        let mut order: Vec<usize> = (0..self.single.len())
            .filter(|&d| self.single[d].is_some())
            .collect();
        order.sort_by(|&a, &b| self.single[b].unwrap().total_cmp(&self.single[a].unwrap()));
        let paths: Vec<Vec<usize>> = order
            .iter()
            .take(self.config.first_hops)
            .flat_map(|&d1| {
                self.expansions[d1]
                    .iter()
                    .filter(move |&&d2| d2 != d1)
                    .map(move |&d2| vec![d1, d2])
            })
            .filter(|p| self.docs[p[1]].is_some())
            .collect();
        self.pending.clear();
        if paths.is_empty() {
            self.result = Some(Ok(self.rank(&[])));
        } else {
            self.queue(paths);
        }
    }
}

fn mean(v: &[f32]) -> f32 {
    (v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64) as f32
}

impl crate::pipeline::Strategy for LepusSearch {
    /// The result, or why the question could not be scored (an encoder error).
    type Output = Result<LepusResult, String>;

    /// Head index 0 (a causal LM has one head).
    fn requests(&self) -> Vec<(Sequence, usize)> {
        if self.result.is_some() {
            return Vec::new();
        }
        self.pending.iter().map(|p| (p.seq.clone(), 0)).collect()
    }

    fn feed(&mut self, logprobs: Vec<Vec<f32>>) {
        LepusSearch::feed(self, &logprobs);
    }

    fn take_output(&mut self) -> Option<Self::Output> {
        self.result.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Strategy;

    /// One token per character; the question's characters are marked.
    struct Chars;

    impl PromptEncoder for Chars {
        fn encode(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
            let text = format!("{} {question}", prompt.trim());
            let n_q = question.chars().count();
            let ids: Vec<u32> = text.chars().map(u32::from).collect();
            let mut type_ids = vec![0; ids.len()];
            for t in &mut type_ids[ids.len() - n_q..] {
                *t = 1;
            }
            Ok(Sequence {
                ids,
                type_ids,
                mask: Vec::new(),
            })
        }
    }

    fn decode(seq: &Sequence) -> String {
        seq.ids
            .iter()
            .map(|&c| char::from_u32(c).unwrap())
            .collect()
    }

    #[test]
    fn instruction_files_give_templates() {
        let text = "# header\n\nAsk it.\nPassage: <P> Then ask. Question:\n";
        let after = parse_templates(text, InstructionPosition::After, 2).unwrap();
        assert_eq!(after[0].0, "Document: <P> Ask it. Question:");
        assert_eq!(after[1].0, "Passage: <P> Then ask. Question:");
        let before = parse_templates(text, InstructionPosition::Before, 1).unwrap();
        assert_eq!(
            before,
            vec![Template("Ask it. Document: <P> Question:".into())]
        );
        assert!(parse_templates(text, InstructionPosition::After, 3).is_err());
        let shipped = parse_templates(DEFAULT_INSTRUCTIONS, InstructionPosition::After, 6);
        assert_eq!(shipped.unwrap().len(), 6);
    }

    #[test]
    fn demonstrations_go_before_the_template_as_run_py_puts_them() {
        let t = Template("Document: <P> Read the documents. Question:".into());
        let demo = |q: &str, docs: &[&str]| Demo {
            question: q.into(),
            gold_path_texts: docs.iter().map(|d| d.to_string()).collect(),
        };
        let sets = vec![
            vec![demo("Who?", &["A.", "B."]), demo("When", &["C."])],
            vec![demo("Where?", &["D."])],
        ];
        let out = with_demos(std::slice::from_ref(&t), &sets);
        assert_eq!(
            out[0].0,
            "Document: A. Document: B.  Read the documents. Question: Who? \
             Document: C.  Read the documents. Question: When \
             Document: <P> Read the documents. Question:"
        );
        assert_eq!(
            out[1].0,
            "Document: D.  Read the documents. Question: Where? \
             Document: <P> Read the documents. Question:"
        );
        // Rendered like any template: the documents replace the one `<P>` left.
        assert_eq!(
            out[1].render(&["E."]),
            "Document: D.  Read the documents. Question: Where? \
             Document: E.  Read the documents. Question:"
        );
    }

    #[test]
    fn prompts_follow_the_official_create_prompt() {
        let t = Template("Document: <P> Read them and ask. Question:".into());
        assert_eq!(
            t.render(&["A b.", "C d."]),
            "Document: A b. Document: C d.  Read them and ask. Question:"
        );
        assert_eq!(
            t.render(&["A b."]),
            "Document: A b.  Read them and ask. Question:"
        );
        let before = Template("Ask about the passages. Passage: <P> Question:".into());
        assert_eq!(
            before.render(&["x", " ", "y"]),
            "Ask about the passages. Passage: x Passage: y  Question:"
        );
        let bare = Template("<P> Question:".into());
        // No prefix: `"{p}  <P>"` per document, then `" <P>"` removed.
        assert_eq!(bare.render(&["x", "y"]), "x  y  Question:");
        assert_eq!(question_text("Who?"), "Who?");
        assert_eq!(question_text("Who"), "Who?");
    }

    /// Scores every request by a table keyed by the prompt's documents: the score of
    /// a token is `table(docs)`, so the mean is too.
    fn run(s: &mut LepusSearch, table: impl Fn(&str) -> f32) -> Vec<Vec<String>> {
        let mut steps = Vec::new();
        loop {
            let reqs = s.requests();
            if reqs.is_empty() {
                return steps;
            }
            let texts: Vec<String> = reqs.iter().map(|(q, _)| decode(q)).collect();
            let lps = reqs
                .iter()
                .zip(&texts)
                .map(|((q, _), text)| {
                    let n = q.type_ids.iter().filter(|&&t| t == 1).count();
                    vec![table(text); n]
                })
                .collect();
            steps.push(texts);
            Strategy::feed(s, lps);
        }
    }

    fn search(first_hops: usize, ensemble: Ensemble, templates: &[&str]) -> LepusSearch {
        let docs = ["d0", "d1", "d2", "", "d4"]
            .iter()
            .map(|d| (!d.is_empty()).then(|| d.to_string()))
            .collect();
        // Second hops of each passage (the caller's TF-IDF order).
        let expansions = vec![vec![4, 1], vec![2, 0], vec![0, 4], vec![], vec![1, 2]];
        LepusSearch::new(
            "Which one",
            docs,
            expansions,
            templates.iter().map(|t| Template(t.to_string())).collect(),
            LepusConfig {
                first_hops,
                ensemble,
                path_ensemble: Ensemble::Mean,
            },
            Arc::new(Chars),
        )
    }

    #[test]
    fn two_step_search_ranks_documents_by_their_best_prompt() {
        let mut s = search(2, Ensemble::Mean, &["Document: <P> Ask. Question:"]);
        let score = |text: &str| match text.split(" Ask.").next().unwrap().trim() {
            "Document: d0" => -3.0,
            "Document: d1" => -1.0,
            "Document: d2" => -2.5,
            "Document: d4" => -2.0,
            "Document: d1 Document: d2" => -0.5,
            "Document: d1 Document: d0" => -4.0,
            "Document: d4 Document: d1" => -1.5,
            "Document: d4 Document: d2" => -0.5,
            other => panic!("unexpected prompt {other:?}"),
        };
        let steps = run(&mut s, score);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].len(), 4, "the blank passage is no candidate");
        assert_eq!(steps[0][0], "Document: d0  Ask. Question: Which one?");
        // K1 = 2: d1 (−1) and d4 (−2) are expanded by their two second hops each.
        assert_eq!(steps[1].len(), 4);
        let r = s.take_output().unwrap().unwrap();
        // d1, d2, d4 reach −0.5 (ties in passage order); d0 keeps −3.
        assert_eq!(r.ranking, vec![1, 2, 4, 0]);
        assert_eq!(r.doc_scores, vec![-0.5, -0.5, -0.5, -3.0]);
        let paths: Vec<(Vec<usize>, f32)> = r
            .top_paths
            .iter()
            .map(|p| (p.chain.clone(), p.score))
            .collect();
        assert_eq!(
            paths,
            vec![
                (vec![1, 2], -0.5),
                (vec![4, 2], -0.5),
                (vec![4, 1], -1.5),
                (vec![1, 0], -4.0)
            ]
        );
        assert_eq!(
            r.single_scores,
            vec![Some(-3.0), Some(-1.0), Some(-2.5), None, Some(-2.0)]
        );
        assert_eq!(r.best_path().unwrap().chain, vec![1, 2]);
    }

    #[test]
    fn ensembles_combine_templates_per_step() {
        // Template A scores a prompt by its first document, B by a constant.
        let templates = ["Document: <P> A. Question:", "Document: <P> B. Question:"];
        let score = |text: &str| {
            if text.contains(" B. ") {
                return -1.0;
            }
            match &text[10..12] {
                "d0" => -5.0,
                "d1" => -3.0,
                _ => -2.0,
            }
        };
        // Mean: d2 and d4 tie at −1.5, d2 is expanded; max: all tie at −1, d0 is
        // expanded. Paths always use the mean over their first document's templates.
        for (ensemble, want_single, want_path) in [
            (Ensemble::Mean, -2.0f32, -1.5f32),
            (Ensemble::Max, -1.0, -3.0),
        ] {
            let mut s = search(1, ensemble, &templates);
            let steps = run(&mut s, score);
            assert_eq!(steps[0].len(), 8, "4 candidates × 2 templates");
            let r = s.take_output().unwrap().unwrap();
            assert_eq!(r.single_scores[1], Some(want_single));
            assert_eq!(r.top_paths.len(), 2);
            assert!(r.top_paths.iter().all(|p| p.score == want_path), "{r:?}");
        }
    }

    #[test]
    fn prompts_cut_to_one_sequence_end_the_search() {
        // An encoder whose budget ends before the documents: every prompt encodes the
        // same, so every passage would score the same.
        struct CutsEarly;
        impl PromptEncoder for CutsEarly {
            fn encode(&self, prompt: &str, _: &str) -> Result<Sequence, String> {
                Ok(Sequence {
                    ids: prompt.bytes().take(9).map(u32::from).collect(),
                    type_ids: vec![0; 9],
                    mask: Vec::new(),
                })
            }
        }
        let search = |docs: Vec<Option<String>>| {
            let n = docs.len();
            LepusSearch::new(
                "q",
                docs,
                vec![vec![]; n],
                Arc::from(vec![Template("Document: <P> Question:".into())]),
                LepusConfig {
                    first_hops: 1,
                    ensemble: Ensemble::Mean,
                    path_ensemble: Ensemble::Mean,
                },
                Arc::new(CutsEarly),
            )
        };
        let mut s = search(vec![Some("d0".into()), Some("d1".into())]);
        assert!(s.requests().is_empty());
        let err = s.take_output().unwrap().unwrap_err();
        assert!(err.contains("the cut removed the passages"), "{err}");
        // One passage, or passages of one text, are no such cut.
        assert!(!search(vec![Some("d0".into())]).requests().is_empty());
        assert!(!search(vec![Some("d".into()), Some("d".into())])
            .requests()
            .is_empty());
    }

    #[test]
    fn encoder_errors_end_the_search_with_the_reason() {
        struct Refuses;
        impl PromptEncoder for Refuses {
            fn encode(&self, _: &str, _: &str) -> Result<Sequence, String> {
                Err("too long".into())
            }
        }
        let mut s = LepusSearch::new(
            "q",
            vec![Some("d".into())],
            vec![vec![]],
            Arc::from(vec![Template("Document: <P> Question:".into())]),
            LepusConfig {
                first_hops: 1,
                ensemble: Ensemble::Mean,
                path_ensemble: Ensemble::Mean,
            },
            Arc::new(Refuses),
        );
        assert!(s.requests().is_empty());
        assert_eq!(
            s.take_output(),
            Some(Err("passages [0]: too long".to_string()))
        );
    }
}
