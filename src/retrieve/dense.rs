//! Exact maximum inner product search over an embedding index: the Parquet files of
//! `hopscore embed` (`id`, `embedding`), streamed in blocks. Each block is one GEMM
//! (queries × blockᵀ, on the backend: the CPU or the GPU) and a bounded top-k per
//! query, so memory is the block plus `queries × k` hits, whatever the index size.
//!
//! An index is checked before its hits are trusted: no file twice, the shards of one
//! corpus complete and none twice (`hopscore.shard`), made from the corpus searched
//! (`hopscore.input_sha256`) by the query encoder's model, pooling and normalisation;
//! the first scan refuses a null or repeated id and a vector holding NaN or ±inf.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as Atomic};

use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float16Type, Float32Type};
use arrow_array::{Array, FixedSizeListArray};
use arrow_schema::DataType;

use crate::backend::Backend;
use crate::io::fingerprint::file_sha256;
use crate::io::parquet_io::{display_column, ParquetInput};
use crate::io::paths::same_file;
use crate::io::shard::{parse_shard, Shard};
use crate::tensor::HostTensor;

/// Index rows per block (one GEMM each): 8192 × 768 f32 is 24 MiB.
pub const BLOCK_ROWS: usize = 8192;

/// One index entry found for a query.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseHit {
    /// The passage id (the index's `id`, as text).
    pub id: String,
    pub score: f32,
    /// Row over all index files, in the order given (ties go to the lower row).
    pub row: u64,
}

/// Heap order: the worst hit on top (lower score, then higher row).
struct Worst(DenseHit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        worse(self.0.score, self.0.row, &other.0)
    }
}

/// How a hit of `score` at `row` compares with `than` in badness: `Greater` when it
/// is worse (a lower score, or an equal score at a later row).
fn worse(score: f32, row: u64, than: &DenseHit) -> Ordering {
    than.score.total_cmp(&score).then(row.cmp(&than.row))
}

/// The `k` best hits of one query seen so far.
struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    fn new(k: usize) -> Self {
        Self {
            k: k.max(1),
            heap: BinaryHeap::new(),
        }
    }

    fn offer(&mut self, score: f32, row: u64, id: impl FnOnce() -> String) {
        if self.heap.len() == self.k {
            if worse(score, row, &self.heap.peek().expect("k > 0").0) == Ordering::Greater {
                return;
            }
            self.heap.pop();
        }
        self.heap.push(Worst(DenseHit {
            id: id(),
            score,
            row,
        }));
    }

    fn into_sorted(self) -> Vec<DenseHit> {
        // Ascending in `Worst` order is best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|w| w.0)
            .collect()
    }
}

/// The embedding index: one or more `hopscore embed` outputs, read in order.
pub struct DenseIndex {
    pub files: Vec<PathBuf>,
    pub dim: usize,
    /// `hopscore.model_sha256` of the files (all equal).
    pub model_sha256: Option<String>,
    pub rows: u64,
    /// Each file's `hopscore.*` metadata (empty for an index other tools wrote).
    recorded: Vec<HashMap<String, String>>,
    /// Whether a whole scan has found every id present and distinct.
    ids_checked: AtomicBool,
}

/// The settings `embed` records that the query encoder must share: a mismatch is
/// refused (`(metadata key, flag that sets it)`).
const SAME_ENCODING: [(&str, &str); 2] = [("pooling", "--pooling"), ("normalize", "--normalize")];

/// `fixed_size_list<float32|float16>` of width `dim`: the row-major f32 values.
fn vectors(col: &dyn Array, dim: usize, path: &Path) -> Result<Vec<f32>> {
    let list: &FixedSizeListArray = col
        .as_fixed_size_list_opt()
        .with_context(|| format!("{}: `embedding` is not a fixed_size_list", path.display()))?;
    if list.value_length() as usize != dim || list.null_count() > 0 {
        bail!(
            "{}: `embedding` has width {} or null rows; expected {dim} wide, no nulls",
            path.display(),
            list.value_length()
        );
    }
    let values = list.values();
    let start = list.offset() * dim;
    let n = list.len() * dim;
    Ok(match values.data_type() {
        DataType::Float32 => {
            values.as_primitive::<Float32Type>().values()[start..start + n].to_vec()
        }
        DataType::Float16 => values.as_primitive::<Float16Type>().values()[start..start + n]
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        other => bail!(
            "{}: `embedding` holds {other}; expected float32 or float16",
            path.display()
        ),
    })
}

impl DenseIndex {
    /// Opens `files` and checks that they agree on the width and the model, that no
    /// file is given twice, and that the shards they record cover one corpus once.
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        anyhow::ensure!(!files.is_empty(), "no index file given (--index)");
        for (i, a) in files.iter().enumerate() {
            if let Some(b) = files[i + 1..].iter().find(|b| same_file(a, b)) {
                bail!(
                    "--index {} is given twice (as {}): each of its passages would be in \
                     the pool twice; give each index file once",
                    a.display(),
                    b.display()
                );
            }
        }
        let (mut dim, mut model, mut rows) = (None, None, 0);
        let mut recorded = Vec::new();
        for path in files {
            let input = ParquetInput::open(path, 1)?;
            input.check_column("id", &["string", "integer"], true)?;
            let width = match input
                .schema
                .field_with_name("embedding")
                .map(|f| f.data_type())
            {
                Ok(DataType::FixedSizeList(_, w)) => *w as usize,
                _ => bail!(
                    "{} has no `embedding` column of fixed_size_list type: write the index \
                     with `hopscore embed`",
                    path.display()
                ),
            };
            let sha = input
                .schema
                .metadata()
                .get("hopscore.model_sha256")
                .cloned();
            match (dim, &model) {
                (Some(d), _) if d != width => bail!(
                    "{} holds {width}-wide vectors, the other index files {d}",
                    path.display()
                ),
                (Some(_), m) if m != &sha => bail!(
                    "{} was embedded with another model (hopscore.model_sha256 differs)",
                    path.display()
                ),
                _ => {}
            }
            dim = Some(width);
            model = sha;
            rows += input.total_rows;
            recorded.push(
                input
                    .schema
                    .metadata()
                    .iter()
                    .filter_map(|(k, v)| {
                        Some((k.strip_prefix("hopscore.")?.to_string(), v.clone()))
                    })
                    .collect(),
            );
        }
        let index = Self {
            files: files.to_vec(),
            dim: dim.expect("one file at least"),
            model_sha256: model,
            rows,
            recorded,
            ids_checked: AtomicBool::new(false),
        };
        index.check_shards()?;
        Ok(index)
    }

    /// The files with their recorded `key`.
    fn recorded<'a>(&'a self, key: &'a str) -> impl Iterator<Item = (&'a Path, &'a str)> + 'a {
        self.files
            .iter()
            .zip(&self.recorded)
            .filter_map(move |(f, m)| Some((f.as_path(), m.get(key)?.as_str())))
    }

    /// Refuses shards (`hopscore.shard`) that do not cover one corpus exactly once: a
    /// whole index twice, a whole one with a shard, a shard twice or one missing.
    fn check_shards(&self) -> Result<()> {
        let mut whole: Vec<&Path> = Vec::new();
        let mut parts: Vec<(&Path, Shard)> = Vec::new();
        for (file, shard) in self.recorded("shard") {
            match shard {
                "all" => whole.push(file),
                s => parts.push((
                    file,
                    parse_shard(s)
                        .map_err(|e| anyhow::anyhow!("{}: hopscore.shard {e}", file.display()))?,
                )),
            }
        }
        let both = |a: &Path, b: &Path, why: &str| {
            anyhow::anyhow!(
                "--index {} and {} {why}: each passage would be in the pool twice; give \
                 one index of the corpus (or its shards, each once)",
                a.display(),
                b.display()
            )
        };
        match (whole.as_slice(), parts.first()) {
            ([a, b, ..], _) => return Err(both(a, b, "both index the whole corpus")),
            ([a], Some((b, _))) => {
                return Err(both(a, b, "index the whole corpus and a shard of it"))
            }
            _ => {}
        }
        let Some(&(first, Shard { count, .. })) = parts.first() else {
            return Ok(());
        };
        let mut seen: HashMap<u64, &Path> = HashMap::new();
        for &(file, shard) in &parts {
            if shard.count != count {
                bail!(
                    "--index {} is shard {shard} and {} shard {}/{count}: shards of one \
                     embed run share their count",
                    file.display(),
                    first.display(),
                    parts[0].1.index
                );
            }
            if let Some(other) = seen.insert(shard.index, file) {
                return Err(both(other, file, &format!("are both shard {shard}")));
            }
        }
        let missing: Vec<String> = (0..count)
            .filter(|i| !seen.contains_key(i))
            .map(|i| format!("{i}/{count}"))
            .collect();
        if !missing.is_empty() {
            bail!(
                "the index files cover {} of the corpus's {count} shards: shard {} missing \
                 (its passages could never be retrieved); give every shard's file, or \
                 `hopscore merge` them",
                seen.len(),
                missing.join(", ")
            );
        }
        Ok(())
    }

    /// Refuses an index whose files were embedded from another file than `corpus`
    /// (`hopscore.input_sha256`, when recorded).
    pub fn check_corpus(&self, corpus: &Path) -> Result<()> {
        let mut corpus_sha = None;
        for (file, sha) in self.recorded("input_sha256") {
            let want = match &corpus_sha {
                Some(s) => s,
                None => corpus_sha.insert(file_sha256(corpus)?),
            };
            if sha != want.as_str() {
                bail!(
                    "--index {} was embedded from another file than --corpus {} \
                     (hopscore.input_sha256 differs): give the corpus the index was made \
                     from, or embed this corpus",
                    file.display(),
                    corpus.display()
                );
            }
        }
        Ok(())
    }

    /// Refuses a query encoder of another width, model (`hopscore.model_sha256`),
    /// pooling or normalisation than the index was embedded with; warns when the
    /// truncation length differs or the passages had a prefix the queries lack.
    /// `setting(key)` is the encoder's value of `hopscore.<key>`.
    pub fn check_encoder<'a>(
        &self,
        dim: usize,
        setting: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<()> {
        self.check_model(dim, setting("model_sha256"))?;
        for (key, flag) in SAME_ENCODING {
            let Some(ours) = setting(key) else { continue };
            if let Some((file, theirs)) = self.recorded(key).find(|&(_, v)| v != ours) {
                bail!(
                    "--index {} was embedded with {key} {theirs}, the query encoder has \
                     {key} {ours}: queries and passages must be embedded alike; give \
                     {flag} {}",
                    file.display(),
                    on_off(theirs)
                );
            }
        }
        if let Some(ours) = setting("max_length") {
            if let Some((file, theirs)) = self.recorded("max_length").find(|&(_, v)| v != ours) {
                log::warn!(
                    "--index {} was embedded with max_length {theirs}, queries are cut at \
                     {ours} tokens",
                    file.display()
                );
            }
        }
        if setting("prefix").is_some_and(str::is_empty) {
            if let Some((file, theirs)) = self.recorded("prefix").find(|&(_, v)| !v.is_empty()) {
                log::warn!(
                    "--index {}'s passages were embedded with the prefix {theirs:?}, the \
                     queries with none: a model trained with prefixes (E5) wants its query \
                     prefix (--query-prefix)",
                    file.display()
                );
            }
        }
        Ok(())
    }

    /// Refuses an encoder of another width, or of another model than the one the
    /// index names (`hopscore.model_sha256`).
    fn check_model(&self, dim: usize, model_sha256: Option<&str>) -> Result<()> {
        anyhow::ensure!(
            dim == self.dim,
            "the encoder gives {dim}-wide vectors, the index holds {}-wide ones",
            self.dim
        );
        if self.model_sha256.is_some() && self.model_sha256.as_deref() != model_sha256 {
            bail!(
                "the index was embedded with another model than --encoder \
                 (hopscore.model_sha256 differs): embed the corpus with the same model"
            );
        }
        Ok(())
    }

    /// Calls `f(first_row, ids, vectors)` for each block of up to [`BLOCK_ROWS`]
    /// rows, in file order (`vectors`: `[rows, dim]` row-major; `first_row` counts
    /// over all files).
    fn for_each_block(
        &self,
        mut f: impl FnMut(u64, &arrow_array::StringArray, Vec<f32>) -> Result<()>,
    ) -> Result<()> {
        let check = !self.ids_checked.load(Atomic::Relaxed);
        let mut hashes: Vec<u64> = Vec::with_capacity(if check { self.rows as usize } else { 0 });
        let mut row0 = 0u64;
        for path in &self.files {
            let mut input = ParquetInput::open(path, BLOCK_ROWS)?;
            let total = input.total_rows;
            for batch in input.by_ref() {
                crate::stop::stop_point()?;
                let batch = batch.with_context(|| format!("reading {}", path.display()))?;
                if let Some(bad) = batch.bad.first() {
                    bail!("{}: row {}: {}", path.display(), bad.row, bad.reason);
                }
                let b = &batch.batch;
                let ids = display_column(b.column_by_name("id").context("no id")?)?;
                if let Some(r) = (0..ids.len()).find(|&r| ids.is_null(r)) {
                    bail!(
                        "{}: row {}: `id` is null (a vector no hit could name): give every \
                         index row its passage id",
                        path.display(),
                        batch.rows.get(r).copied().unwrap_or(r as u64)
                    );
                }
                if check {
                    hashes.extend((0..ids.len()).map(|r| id_hash(ids.value(r))));
                }
                let block = vectors(
                    b.column_by_name("embedding").context("no embedding")?,
                    self.dim,
                    path,
                )?;
                if let Some(at) = block.iter().position(|v| !v.is_finite()) {
                    let r = at / self.dim;
                    bail!(
                        "{}: row {} (id `{}`): `embedding` holds NaN or ±inf (a NaN would rank \
                         first for every query): embed that passage again or drop the row",
                        path.display(),
                        batch.rows.get(r).copied().unwrap_or(r as u64),
                        ids.value(r)
                    );
                }
                f(row0 + batch.rows.first().copied().unwrap_or(0), &ids, block)?;
            }
            row0 += total;
        }
        if check {
            self.check_distinct(hashes)?;
            self.ids_checked.store(true, Atomic::Relaxed);
        }
        Ok(())
    }

    /// Refuses an id that two index rows share (`hashes`: of every id, in row order);
    /// a repeated hash is confirmed on the ids themselves by a second scan.
    fn check_distinct(&self, mut hashes: Vec<u64>) -> Result<()> {
        hashes.sort_unstable();
        let repeated: HashSet<u64> = hashes
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        drop(hashes);
        if repeated.is_empty() {
            return Ok(());
        }
        let mut first: HashMap<String, (PathBuf, u64)> = HashMap::new();
        for path in &self.files {
            let mut input = ParquetInput::open(path, BLOCK_ROWS)?;
            for batch in input.by_ref() {
                let batch = batch.with_context(|| format!("reading {}", path.display()))?;
                let ids = display_column(batch.batch.column_by_name("id").context("no id")?)?;
                for (r, &row) in batch.rows.iter().enumerate() {
                    let id = ids.value(r);
                    if !repeated.contains(&id_hash(id)) {
                        continue;
                    }
                    if let Some((file, at)) = first.get(id) {
                        bail!(
                            "index id `{id}` is on two rows ({} row {at}, {} row {row}): \
                             its passage would be in the pool twice; give each passage \
                             one vector (embed a corpus without repeated ids)",
                            file.display(),
                            path.display()
                        );
                    }
                    first.insert(id.to_string(), (path.clone(), row));
                }
            }
        }
        Ok(())
    }

    /// Every row in memory: ids and `[rows, dim]` vectors (for sources searched many
    /// times, such as EfficientRAG's loop over a corpus).
    pub fn load_all(&self) -> Result<(Vec<String>, Vec<f32>)> {
        let (mut ids, mut vectors) = (Vec::new(), Vec::new());
        self.for_each_block(|_, block_ids, block| {
            ids.extend((0..block_ids.len()).map(|r| block_ids.value(r).to_string()));
            vectors.extend(block);
            Ok(())
        })?;
        Ok((ids, vectors))
    }

    /// The `k` best index rows by inner product for each query (`queries`: `[n, dim]`
    /// row-major), best first.
    pub fn search<B: Backend>(
        &self,
        be: &B,
        queries: &[f32],
        k: usize,
    ) -> Result<Vec<Vec<DenseHit>>> {
        let dim = self.dim;
        let n = queries.len() / dim;
        let mut best: Vec<TopK> = (0..n).map(|_| TopK::new(k)).collect();
        if n == 0 {
            return Ok(Vec::new());
        }
        let q = be.upload(&HostTensor::new(vec![n, dim], queries.to_vec()))?;
        self.for_each_block(|row0, ids, block| {
            let rows = ids.len();
            let w = be.upload(&HostTensor::new(vec![rows, dim], block))?;
            let scores = be.download(&be.linear(&q, &w, None)?)?;
            for (qi, top) in best.iter_mut().enumerate() {
                for (r, &s) in scores.data[qi * rows..(qi + 1) * rows].iter().enumerate() {
                    top.offer(s, row0 + r as u64, || ids.value(r).to_string());
                }
            }
            Ok(())
        })?;
        Ok(best.into_iter().map(TopK::into_sorted).collect())
    }
}

/// A 64-bit hash of an index id (collisions are confirmed on the ids).
fn id_hash(id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// A recorded `true`/`false` as the flag spells it (`on`/`off`); other values as
/// they are.
fn on_off(v: &str) -> &str {
    match v {
        "true" => "on",
        "false" => "off",
        v => v,
    }
}

/// The `k` rows of `vectors` (`[rows, dim]`) with the largest inner product with
/// `query`, best first (ties to the lower row): `(row, score)`.
pub fn top_k_inner_product(query: &[f32], vectors: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut top = TopK::new(k);
    for (r, v) in vectors.chunks_exact(query.len().max(1)).enumerate() {
        let s = v.iter().zip(query).map(|(a, b)| a * b).sum();
        top.offer(s, r as u64, String::new);
    }
    top.into_sorted()
        .into_iter()
        .map(|h| (h.row as usize, h.score))
        .collect()
}

/// Reciprocal rank fusion (Cormack et al. 2009): `Σ 1 / (c + rank)` over the rankings
/// (rank from 1), the `k` best ids first; ties go to the id first seen.
pub fn reciprocal_rank_fusion(rankings: &[Vec<String>], c: f64, k: usize) -> Vec<(String, f64)> {
    let mut order: Vec<String> = Vec::new();
    let mut score: std::collections::HashMap<String, f64> = Default::default();
    for ranking in rankings {
        for (rank, id) in ranking.iter().enumerate() {
            let s = score.entry(id.clone()).or_insert_with(|| {
                order.push(id.clone());
                0.0
            });
            *s += 1.0 / (c + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(usize, String, f64)> = order
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let s = score[&id];
            (i, id, s)
        })
        .collect();
    fused.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    fused
        .into_iter()
        .take(k)
        .map(|(_, id, s)| (id, s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_best_and_breaks_ties_by_row() {
        let mut t = TopK::new(3);
        for (row, s) in [(0, 0.5), (1, 0.9), (2, 0.1), (3, 0.9), (4, 0.7), (5, 0.5)] {
            t.offer(s, row, || format!("p{row}"));
        }
        let got: Vec<(String, f32)> = t
            .into_sorted()
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect();
        assert_eq!(
            got,
            vec![("p1".into(), 0.9), ("p3".into(), 0.9), ("p4".into(), 0.7)]
        );
    }

    #[test]
    fn a_non_finite_vector_is_refused_naming_its_row() {
        use arrow_array::{Float32Array, StringArray};
        use arrow_schema::{Field, Schema};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        let item = Arc::new(Field::new("item", DataType::Float32, false));
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("embedding", DataType::FixedSizeList(item.clone(), 2), false),
        ]));
        let values = Float32Array::from(vec![1.0, 0.0, f32::NAN, 0.0, 0.0, 1.0]);
        let embedding = FixedSizeListArray::new(item, 2, Arc::new(values), None);
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(embedding),
            ],
        )
        .unwrap();
        let file = std::fs::File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let index = DenseIndex::open(&[path]).unwrap();
        let err = index.load_all().unwrap_err().to_string();
        assert!(
            err.contains("row 1 (id `b`)") && err.contains("NaN"),
            "{err}"
        );
    }

    #[test]
    fn fusion_sums_reciprocal_ranks() {
        let a = vec!["x".to_string(), "y".to_string(), "z".to_string()];
        let b = vec!["y".to_string(), "w".to_string()];
        let fused = reciprocal_rank_fusion(&[a, b], 60.0, 3);
        let ids: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["y", "x", "w"]);
        assert!((fused[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert!((fused[1].1 - 1.0 / 61.0).abs() < 1e-12);
    }
}
