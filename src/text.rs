//! Small text helpers shared by every command: the last lines of a log, command lines as a
//! shell takes them back, byte sizes as a person reads them.

/// The last `n` non-empty lines of `lines`.
pub fn last_lines(lines: &[String], n: usize) -> Vec<String> {
    let non_empty: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    non_empty[non_empty.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_skip_blank_ones() {
        let lines: Vec<String> = ["a", "", "b", "  ", "c"].map(String::from).into();
        assert_eq!(last_lines(&lines, 2), ["b", "c"]);
        assert_eq!(last_lines(&lines, 9), ["a", "b", "c"]);
        assert!(last_lines(&[], 3).is_empty());
    }
}
