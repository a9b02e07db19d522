//! `--shard i/N`: the `i`-th of `N` contiguous row ranges of an input, as runs select
//! them and their outputs' metadata (`hopscore.shard`) records them.

/// A `--shard i/N` selection: the `i`-th of `N` contiguous, near-equal row ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// Rows `[start, end)` of this shard among `total` input rows.
    pub fn range(&self, total: u64) -> (u64, u64) {
        (
            total * self.index / self.count,
            total * (self.index + 1) / self.count,
        )
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Parses `i/N` with `0 ≤ i < N`.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("`{s}`: expected i/N with 0 ≤ i < N, e.g. 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_rows() {
        assert_eq!(parse_shard("1/4"), Ok(Shard { index: 1, count: 4 }));
        assert!(
            parse_shard("4/4").is_err() && parse_shard("x").is_err() && parse_shard("0/0").is_err()
        );
        let ranges: Vec<(u64, u64)> = (0..3)
            .map(|i| Shard { index: i, count: 3 }.range(10))
            .collect();
        assert_eq!(ranges, vec![(0, 3), (3, 6), (6, 10)]);
    }
}
