//! When a removed exec's figures are final: the decision alone, apart from the maps it is
//! read from, so that its cases are tested without a kernel.

use std::time::Duration;

/// What is known of a removed exec when its end is decided.
#[derive(Clone, Copy, Debug, Default)]
pub struct EndState {
    /// Its tasks that have not switched out for the last time (the kernel's `pending`).
    pub pending_tasks: i64,
    /// Time since its cgroup was removed.
    pub waited: Duration,
    /// The figures the kernel read at removal wait for tasks that were still exiting then:
    /// the last of them reads them again.
    pub late_finals: bool,
    /// Its container runtime's metadata was asked for and has not arrived.
    pub metadata_pending: bool,
}

/// The decision for one removed exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Not yet: something it waits for may still come within the grace period.
    Wait,
    /// Report it now, with what is missing from its record.
    Report { notes: Vec<String> },
}

/// Whether an exec's tasks allow its end to be decided: all of them are gone, or the grace
/// period is over. The ring buffer is read once more before [`ending`] (the last tasks'
/// records were sent before their pending count dropped).
pub fn tasks_settled(pending_tasks: i64, waited: Duration, grace: Duration) -> bool {
    pending_tasks <= 0 || waited >= grace
}

/// The end of a removed exec: it waits for its last tasks, its late final figures and its
/// metadata up to `grace` after the removal, then is reported with notes on what did not come.
pub fn ending(s: &EndState, grace: Duration) -> Ending {
    let in_grace = s.waited < grace;
    if in_grace && (s.pending_tasks > 0 || s.late_finals || s.metadata_pending) {
        return Ending::Wait;
    }
    let mut notes = Vec::new();
    if s.metadata_pending {
        notes.push(format!(
            "container metadata was not read within {grace:?} of the exec's end"
        ));
    }
    if s.pending_tasks > 0 {
        notes.push(format!(
            "{} task(s) had not switched out for the last time within {grace:?} of the \
             cgroup's removal (stuck exiting, or a switch the kernel ran no BPF program for): \
             their figures are missing",
            s.pending_tasks
        ));
    }
    Ending::Report { notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);

    fn at(ms: u64) -> EndState {
        EndState {
            waited: Duration::from_millis(ms),
            ..Default::default()
        }
    }

    fn notes(e: Ending) -> Vec<String> {
        match e {
            Ending::Report { notes } => notes,
            Ending::Wait => panic!("expected a report"),
        }
    }

    #[test]
    fn an_exec_with_nothing_outstanding_ends_at_once_without_notes() {
        assert!(tasks_settled(0, Duration::ZERO, GRACE));
        assert_eq!(notes(ending(&at(0), GRACE)), Vec::<String>::new());
    }

    #[test]
    fn pending_tasks_are_waited_for_until_the_grace_period_ends() {
        let s = EndState {
            pending_tasks: 2,
            ..at(1999)
        };
        assert!(!tasks_settled(2, s.waited, GRACE));
        assert_eq!(ending(&s, GRACE), Ending::Wait);
        let s = EndState {
            pending_tasks: 2,
            ..at(2000)
        };
        assert!(tasks_settled(2, s.waited, GRACE));
        let n = notes(ending(&s, GRACE));
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("2 task(s) had not switched out"), "{n:?}");
    }

    #[test]
    fn a_negative_pending_count_is_not_waited_for() {
        // More last switches than tasks counted (a task that entered before the attach).
        let s = EndState {
            pending_tasks: -1,
            ..at(0)
        };
        assert!(tasks_settled(-1, s.waited, GRACE));
        assert_eq!(notes(ending(&s, GRACE)), Vec::<String>::new());
    }

    #[test]
    fn late_final_figures_are_waited_for_and_then_reported_as_they_stand() {
        // A cgroup removed while its tasks were still exiting: the last one re-reads.
        let s = EndState {
            late_finals: true,
            ..at(10)
        };
        assert_eq!(ending(&s, GRACE), Ending::Wait);
        // The record notes the missing moments itself (from the final figures' own count).
        let s = EndState {
            late_finals: true,
            ..at(2500)
        };
        assert_eq!(notes(ending(&s, GRACE)), Vec::<String>::new());
    }

    #[test]
    fn metadata_is_waited_for_then_named_missing() {
        let s = EndState {
            metadata_pending: true,
            ..at(100)
        };
        assert_eq!(ending(&s, GRACE), Ending::Wait);
        let s = EndState {
            metadata_pending: true,
            pending_tasks: 1,
            ..at(3000)
        };
        let n = notes(ending(&s, GRACE));
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].starts_with("container metadata was not read within 2s"));
        assert!(n[1].starts_with("1 task(s)"));
    }

    #[test]
    fn a_zero_grace_period_reports_at_once_with_what_is_missing() {
        let s = EndState {
            pending_tasks: 1,
            late_finals: true,
            metadata_pending: true,
            waited: Duration::ZERO,
        };
        assert_eq!(notes(ending(&s, Duration::ZERO)).len(), 2);
    }
}
