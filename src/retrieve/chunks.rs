//! The chunk sources of EfficientRAG's loop (docs/spec.md §2): where each iteration's
//! query retrieves. BM25 over a question's own passages ([`PoolChunks`]), dense over
//! their vectors ([`DensePool`]), or a corpus through BM25 or its `embed` index
//! ([`CorpusChunks`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::dense::{top_k_inner_product, DenseIndex};
use super::{Bm25Index, Corpus};
use crate::text::render::efficientrag_chunk;

/// Embeds one query (the bi-encoder of dense retrieval).
pub type QueryEncoder = Arc<dyn Fn(&str) -> Result<Vec<f32>> + Send + Sync>;

/// Where the loop retrieves chunks: an index over texts the Labeler reads.
pub trait ChunkSource: Send + Sync {
    /// The `k` best chunks for `query`, best first (BM25: only chunks sharing a term),
    /// or why the query cannot be searched (the question then fails).
    fn search(&self, query: &str, k: usize) -> Result<Vec<usize>, String>;
    /// The text of chunk `doc` as the Labeler reads it.
    fn chunk(&self, doc: usize) -> String;
}

/// A question's own passages, rendered and indexed.
pub struct PoolChunks {
    chunks: Vec<String>,
    index: Bm25Index,
}

impl PoolChunks {
    /// Indexes the chunk texts themselves.
    pub fn new(chunks: Vec<String>) -> Self {
        let index = Bm25Index::new(&chunks);
        Self { chunks, index }
    }
}

impl ChunkSource for PoolChunks {
    fn search(&self, query: &str, k: usize) -> Result<Vec<usize>, String> {
        Ok(self.index.search(query, k).iter().map(|h| h.doc).collect())
    }
    fn chunk(&self, doc: usize) -> String {
        self.chunks[doc].clone()
    }
}

/// Dense retrieval over a chunk source's chunks (the official code's Contriever
/// index): the query embedded on the CPU each iteration, the `k` chunks of largest
/// inner product, best first.
pub struct DenseVectors {
    pub encoder: QueryEncoder,
    /// `[chunks, dim]`, in the source's chunk order.
    pub vectors: Vec<f32>,
}

impl DenseVectors {
    fn search(&self, query: &str, k: usize) -> Result<Vec<usize>, String> {
        let q = (self.encoder)(query).map_err(|e| format!("cannot embed the query: {e:#}"))?;
        Ok(top_k_inner_product(&q, &self.vectors, k)
            .into_iter()
            .map(|(doc, _)| doc)
            .collect())
    }
}

/// A question's own passages searched densely.
pub struct DensePool {
    pub chunks: Vec<String>,
    pub dense: DenseVectors,
}

impl ChunkSource for DensePool {
    fn search(&self, query: &str, k: usize) -> Result<Vec<usize>, String> {
        self.dense.search(query, k)
    }
    fn chunk(&self, doc: usize) -> String {
        self.chunks[doc].clone()
    }
}

/// A corpus as a chunk source: chunks `"{title}: {text}"` (just the text when the
/// title is empty); BM25 over `title + " " + text`, or dense over its index vectors.
pub struct CorpusChunks {
    pub corpus: Corpus,
    pub dense: Option<DenseVectors>,
}

impl ChunkSource for CorpusChunks {
    fn search(&self, query: &str, k: usize) -> Result<Vec<usize>, String> {
        match &self.dense {
            Some(d) => d.search(query, k),
            None => Ok(self
                .corpus
                .index
                .search(query, k)
                .iter()
                .map(|h| h.doc)
                .collect()),
        }
    }
    fn chunk(&self, doc: usize) -> String {
        let (title, text) = (&self.corpus.titles[doc], &self.corpus.texts[doc]);
        if title.is_empty() {
            text.clone()
        } else {
            efficientrag_chunk(title, text, None)
        }
    }
}

/// The corpus's vectors from its index, in corpus order (every row must have one).
/// `dim` and `setting` describe the query encoder ([`DenseIndex::check_encoder`]).
pub fn corpus_vectors<'a>(
    corpus: &Corpus,
    corpus_path: &Path,
    index: &[PathBuf],
    dim: usize,
    setting: impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<f32>> {
    anyhow::ensure!(
        !index.is_empty(),
        "--retriever dense with --corpus needs the corpus's vectors (--index FILE, written \
         by `hopscore embed` from the same corpus file)"
    );
    let index = DenseIndex::open(index)?;
    index.check_corpus(corpus_path)?;
    index.check_encoder(dim, setting)?;
    let (ids, vectors) = index.load_all()?;
    let row: std::collections::HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(r, id)| (id.as_str(), r))
        .collect();
    let dim = index.dim;
    let mut out = Vec::with_capacity(corpus.len() * dim);
    for id in &corpus.ids {
        let r = *row.get(id.as_str()).with_context(|| {
            format!("corpus row `{id}` has no vector in the index: embed this corpus file")
        })?;
        out.extend_from_slice(&vectors[r * dim..(r + 1) * dim]);
    }
    Ok(out)
}
