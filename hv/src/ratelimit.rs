//! A per-domain budget for log lines a guest can provoke at will (an unknown
//! MSR, a bad device access): a guest that loops on one must not flood the
//! console, which every CPU shares and which holds a lock while it prints.

/// Lines logged in full before the budget thins them out.
pub const FIRST_LINES: u64 = 10;
/// After that, one line in this many.
pub const THEN_EVERY: u64 = 1000;

/// How many guest-provoked lines a domain has asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogBudget {
    asked: u64,
}

/// Whether to print a line, and how many were dropped since the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Print it; `dropped` lines were left out before it.
    Print {
        /// Lines left out since the last printed one.
        dropped: u64,
    },
    /// Leave it out.
    Drop,
}

impl LogBudget {
    /// Asks for one more line.
    pub fn ask(&mut self) -> Verdict {
        self.asked = self.asked.saturating_add(1);
        if self.asked <= FIRST_LINES {
            Verdict::Print { dropped: 0 }
        } else if (self.asked - FIRST_LINES).is_multiple_of(THEN_EVERY) {
            Verdict::Print {
                dropped: THEN_EVERY - 1,
            }
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_lines_print_then_one_in_a_thousand() {
        let mut budget = LogBudget::default();
        let verdicts: Vec<Verdict> = (0..FIRST_LINES + 2 * THEN_EVERY)
            .map(|_| budget.ask())
            .collect();
        let printed: Vec<(usize, u64)> = verdicts
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Verdict::Print { dropped } => Some((i, *dropped)),
                Verdict::Drop => None,
            })
            .collect();
        assert_eq!(printed.len() as u64, FIRST_LINES + 2);
        assert!(printed[..FIRST_LINES as usize].iter().all(|&(_, d)| d == 0));
        assert_eq!(
            printed[FIRST_LINES as usize],
            ((FIRST_LINES + THEN_EVERY - 1) as usize, THEN_EVERY - 1)
        );
    }
}
