//! What a scenario expects to see on the serial console, checked against the
//! lines read so far.

use std::collections::HashSet;
use std::fmt;

use regex::Regex;

/// One thing the console output must show. Checked against the whole list of
/// lines read so far, so an expectation met early stays met.
#[derive(Clone, Debug)]
pub enum Expectation {
    /// Some line contains this text.
    Contains(String),
    /// Some line is exactly this text (trailing whitespace aside), so
    /// `EXIT: STATUS=1` is not met by `EXIT: STATUS=127`.
    Line(String),
    /// At least `count` different lines match `pattern`. Lines count as
    /// different by the text the pattern matched, so the same message printed
    /// twice (say by two CPUs, with different `[cpuN]` prefixes) counts once.
    Distinct {
        /// The pattern a line must match.
        pattern: Regex,
        /// How many different matches are needed.
        count: usize,
    },
    /// Some line matches `pattern` with its first capture group a number of
    /// at least `min` (a count the output must reach, not just print).
    AtLeast {
        /// The pattern, with the number as its first capture group.
        pattern: Regex,
        /// The smallest number that meets it.
        min: u64,
    },
    /// Every one of these, in any order.
    AllOf(Vec<Expectation>),
    /// Each one met strictly after the line where the one before it was met.
    InOrder(Vec<Expectation>),
}

/// A regular expression given to [`Expectation::matching`] does not compile.
#[derive(Debug)]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What the regex parser said.
    pub reason: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad pattern {:?}: {}", self.pattern, self.reason)
    }
}

impl std::error::Error for PatternError {}

impl Expectation {
    /// Some line contains `text`.
    pub fn contains(text: impl Into<String>) -> Self {
        Self::Contains(text.into())
    }

    /// Some line is exactly `text` (trailing whitespace aside).
    pub fn line(text: impl Into<String>) -> Self {
        Self::Line(text.into())
    }

    /// At least `count` different lines match the regular expression `pattern`.
    pub fn matching(pattern: &str, count: usize) -> Result<Self, PatternError> {
        let pattern = Regex::new(pattern).map_err(|e| PatternError {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Self::Distinct { pattern, count })
    }

    /// Some line matches `pattern`, whose first capture group is a number of
    /// at least `min`.
    pub fn at_least(pattern: &str, min: u64) -> Result<Self, PatternError> {
        let regex = Regex::new(pattern).map_err(|e| PatternError {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })?;
        if regex.captures_len() < 2 {
            return Err(PatternError {
                pattern: pattern.to_string(),
                reason: "it has no capture group for the number".to_string(),
            });
        }
        Ok(Self::AtLeast {
            pattern: regex,
            min,
        })
    }

    /// For every value, a line contains `template` with `{}` replaced by the
    /// value, as a whole word (so `cpu 1 online` is not met by `cpu 11 online`).
    pub fn each<T: fmt::Display>(
        template: &str,
        values: impl IntoIterator<Item = T>,
    ) -> Result<Self, PatternError> {
        let all = values
            .into_iter()
            .map(|value| {
                let text = template.replace("{}", &value.to_string());
                Self::matching(&format!(r"(^|\W){}($|\W)", regex::escape(&text)), 1)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::AllOf(all))
    }

    /// The index of the line at which this expectation is first met, looking only
    /// at `lines[from..]`, or `None` if it is not met there.
    pub fn met_at(&self, lines: &[String], from: usize) -> Option<usize> {
        let tail = lines.get(from..)?;
        match self {
            Self::Contains(text) => tail
                .iter()
                .position(|line| line.contains(text.as_str()))
                .map(|i| from + i),
            Self::Line(text) => tail
                .iter()
                .position(|line| line.trim_end() == text.as_str())
                .map(|i| from + i),
            Self::Distinct { pattern, count } => {
                if *count == 0 {
                    return Some(from);
                }
                let mut seen = HashSet::new();
                for (i, line) in tail.iter().enumerate() {
                    if let Some(found) = pattern.find(line)
                        && seen.insert(found.as_str())
                        && seen.len() == *count
                    {
                        return Some(from + i);
                    }
                }
                None
            }
            Self::AtLeast { pattern, min } => tail
                .iter()
                .position(|line| {
                    pattern
                        .captures(line)
                        .and_then(|c| c.get(1))
                        .and_then(|n| n.as_str().parse::<u64>().ok())
                        .is_some_and(|n| n >= *min)
                })
                .map(|i| from + i),
            Self::AllOf(all) => all.iter().try_fold(from, |latest, e| {
                e.met_at(lines, from).map(|at| at.max(latest))
            }),
            Self::InOrder(steps) => {
                let mut next = from;
                let mut last = from;
                for step in steps {
                    last = step.met_at(lines, next)?;
                    next = last + 1;
                }
                Some(last)
            }
        }
    }

    /// Whether this expectation is met anywhere in `lines`.
    pub fn is_met(&self, lines: &[String]) -> bool {
        self.met_at(lines, 0).is_some()
    }

    /// The innermost parts of this expectation that are not met, for a failure
    /// report (an unmet `AllOf` reports only its unmet members).
    pub fn unmet(&self, lines: &[String]) -> Vec<Expectation> {
        match self {
            Self::AllOf(all) if !self.is_met(lines) => {
                all.iter().flat_map(|e| e.unmet(lines)).collect()
            }
            _ if self.is_met(lines) => Vec::new(),
            _ => vec![self.clone()],
        }
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Contains(text) => write!(f, "a line containing {text:?}"),
            Self::Line(text) => write!(f, "a line {text:?}"),
            Self::Distinct { pattern, count } => {
                write!(f, "{count} different line(s) matching /{pattern}/")
            }
            Self::AtLeast { pattern, min } => {
                write!(
                    f,
                    "a line matching /{pattern}/ with a number of at least {min}"
                )
            }
            Self::AllOf(all) => {
                write!(f, "all of [")?;
                for (i, e) in all.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{e}")?;
                }
                write!(f, "]")
            }
            Self::InOrder(steps) => {
                write!(f, "in this order: [")?;
                for (i, e) in steps.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " then " };
                    write!(f, "{sep}{e}")?;
                }
                write!(f, "]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_line_must_be_the_whole_text() {
        let failed = lines(&["[dom14] EXIT: STATUS=127", "[dom1] EXIT: STATUS=1"]);
        assert!(!Expectation::line("[dom14] EXIT: STATUS=1").is_met(&failed));
        assert!(Expectation::contains("[dom14] EXIT: STATUS=1").is_met(&failed));
        let passed = lines(&["[dom14] EXIT: STATUS=1 \r"]);
        assert!(Expectation::line("[dom14] EXIT: STATUS=1").is_met(&passed));
    }

    #[test]
    fn at_least_needs_the_number_reached() {
        let out = lines(&[
            "coresidency: 0 switches checked (busiest: 0 on cpus 4-5), 0 overlaps",
            "coresidency: 90 switches checked (busiest: 60 on cpus 4-5), 0 overlaps",
        ]);
        let e = Expectation::at_least(r"busiest: (\d+) on cpus [^)]*\), 0 overlaps", 50).unwrap();
        assert_eq!(e.met_at(&out, 0), Some(1));
        let more = Expectation::at_least(r"busiest: (\d+) on", 61).unwrap();
        assert!(!more.is_met(&out));
        assert!(
            Expectation::at_least("busiest", 1).is_err(),
            "no capture group"
        );
    }

    #[test]
    fn contains_finds_the_first_line() {
        let out = lines(&["[cpu0] INFO  hello", "[cpu0] INFO  gic: GICv3 at 0x800"]);
        assert_eq!(Expectation::contains("gic: GICv3").met_at(&out, 0), Some(1));
        assert_eq!(Expectation::contains("gic: GICv2").met_at(&out, 0), None);
        assert_eq!(Expectation::contains("hello").met_at(&out, 1), None);
        assert_eq!(Expectation::contains("hello").met_at(&out, 7), None);
    }

    #[test]
    fn distinct_counts_different_matches_only() {
        let out = lines(&[
            "[cpu1] INFO  cpu 1 online",
            "[cpu2] INFO  cpu 1 online",
            "[cpu2] INFO  cpu 2 online",
        ]);
        let two = Expectation::matching(r"cpu \d+ online", 2).unwrap();
        assert_eq!(two.met_at(&out, 0), Some(2));
        let three = Expectation::matching(r"cpu \d+ online", 3).unwrap();
        assert!(!three.is_met(&out));
        assert!(Expectation::matching("(", 1).is_err());
    }

    #[test]
    fn each_matches_whole_words() {
        let out = lines(&["[cpu0] cpu 11 online", "[cpu0] cpu 2 online"]);
        let e = Expectation::each("cpu {} online", [1, 2]).unwrap();
        assert!(!e.is_met(&out));
        let unmet = e.unmet(&out);
        assert_eq!(unmet.len(), 1, "{unmet:?}");
        assert!(unmet[0].to_string().contains("cpu 1 online"));
        let out = lines(&["[cpu1] INFO  cpu 1 online", "[cpu0] cpu 2 online"]);
        assert_eq!(e.met_at(&out, 0), Some(1));
    }

    #[test]
    fn in_order_needs_the_order() {
        let e = Expectation::InOrder(vec![
            Expectation::contains("round trip ok"),
            Expectation::contains("7 of 7"),
        ]);
        assert!(!e.is_met(&lines(&["7 of 7", "cpu 1 round trip ok"])));
        assert_eq!(
            e.met_at(&lines(&["cpu 1 round trip ok", "x", "7 of 7"]), 0),
            Some(2)
        );
        // Both on one line is not "after".
        assert!(!e.is_met(&lines(&["round trip ok 7 of 7"])));
    }

    #[test]
    fn all_of_reports_the_latest_line() {
        let e = Expectation::AllOf(vec![Expectation::contains("b"), Expectation::contains("a")]);
        assert_eq!(e.met_at(&lines(&["a", "b"]), 0), Some(1));
        assert_eq!(e.unmet(&lines(&["a"])).len(), 1);
        assert!(e.unmet(&lines(&["a", "b"])).is_empty());
    }
}
