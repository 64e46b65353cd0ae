//! Memory a catalogue build freed, handed back to the system.
//!
//! A build of thousands of tools parses every declaration and compiles every
//! schema once, then drops most of it. The allocator keeps the pages it freed
//! for a later allocation of the thread that freed them, and a gateway whose
//! catalogue just got built may not allocate much again: with 10,000 tools that
//! was half the resident memory (issue 25). The binary picks the allocator, so
//! it says how to hand its free pages back ([`set_release`]); a library user that
//! sets nothing pays nothing.

use std::sync::OnceLock;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Sets how the allocator hands freed pages back (once; later calls are ignored).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Hands the pages freed on this thread back to the system, when the binary
/// said how.
pub(crate) fn release_freed() {
    if let Some(release) = RELEASE.get() {
        release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLED: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn the_release_set_once_is_the_one_called() {
        set_release(count);
        set_release(|| panic!("a second release is ignored"));
        let before = CALLED.load(Ordering::SeqCst);
        release_freed();
        assert_eq!(CALLED.load(Ordering::SeqCst), before + 1);
    }
}
