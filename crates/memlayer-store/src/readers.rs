//! The read transactions open on the store file, counted by the era they began in: a reopening
//! waits for all of them, and the destruction of a retired data key for those begun before the
//! key was retired (they may still open values sealed under it), while later reads go on.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct Readers {
    eras: Mutex<Eras>,
    ended: Condvar,
}

#[derive(Default)]
struct Eras {
    current: u64,
    /// Reads open, by era; no entry holds zero.
    open: BTreeMap<u64, usize>,
}

/// One open read, given back on drop.
pub(crate) struct OpenRead {
    readers: Arc<Readers>,
    era: u64,
}

impl Drop for OpenRead {
    fn drop(&mut self) {
        let mut eras = self.readers.lock();
        if let Some(count) = eras.open.get_mut(&self.era) {
            *count -= 1;
            if *count == 0 {
                eras.open.remove(&self.era);
                self.readers.ended.notify_all();
            }
        }
    }
}

impl Readers {
    /// Counts a read beginning now.
    pub(crate) fn begin(self: &Arc<Self>) -> OpenRead {
        let mut eras = self.lock();
        let era = eras.current;
        *eras.open.entry(era).or_default() += 1;
        OpenRead {
            readers: Arc::clone(self),
            era,
        }
    }

    /// Reads open now.
    pub(crate) fn open(&self) -> usize {
        self.lock().open.values().sum()
    }

    /// Waits until every read begun before this call has ended, `limit` at most; whether they
    /// all did. Reads beginning meanwhile are not waited for.
    pub(crate) fn wait_for_earlier(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut eras = self.lock();
        let before = eras.current;
        eras.current += 1;
        while eras.open.range(..=before).next().is_some() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            eras = self
                .ended
                .wait_timeout(eras, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    fn lock(&self) -> MutexGuard<'_, Eras> {
        self.eras.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_covers_the_reads_begun_before_it_and_no_later_one() {
        let readers = Arc::new(Readers::default());
        let early = readers.begin();
        assert!(!readers.wait_for_earlier(Duration::from_millis(20)));
        let waiting = {
            let readers = Arc::clone(&readers);
            std::thread::spawn(move || readers.wait_for_earlier(Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(20));
        let late = readers.begin();
        assert!(!waiting.is_finished(), "the early read is still open");
        drop(early);
        assert!(waiting.join().unwrap(), "the late read is not waited for");
        assert_eq!(readers.open(), 1);
        drop(late);
        assert_eq!(readers.open(), 0);
    }
}
