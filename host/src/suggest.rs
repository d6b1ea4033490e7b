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

/// The candidate nearest to `name`, when it is near enough to be a typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let allowed = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::{closest, edit_distance};

    #[test]
    fn closest_only_suggests_near_names() {
        assert_eq!(closest("defualt", ["default", "research"]), Some("default"));
        assert_eq!(closest("zzz", ["default", "research"]), None);
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("polices", "policies"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("座位", "座位"), 0);
    }
}
