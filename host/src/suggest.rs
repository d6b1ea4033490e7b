//! "Did you mean …?" for names users mistype (config keys, policy groups).

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The candidate closest to `word`, if it is a plausible typo of it (at most
/// one edit per three characters).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let (distance, best) = candidates
        .into_iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .min_by_key(|(distance, _)| *distance)?;
    (distance <= word.chars().count().div_ceil(3)).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::{closest, edit_distance};

    #[test]
    fn closest_suggests_only_plausible_typos() {
        let names = ["default", "research", "scratch"];
        assert_eq!(closest("defualt", names), Some("default"));
        assert_eq!(closest("reserch", names), Some("research"));
        assert_eq!(closest("zzz", names), None);
        assert_eq!(closest("x", []), None);
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("polices", "policies"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("座位", "座位"), 0);
    }
}
