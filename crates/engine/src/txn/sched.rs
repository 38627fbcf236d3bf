//! Schedule points for deterministic interleaving tests (test builds only).
//!
//! Some races live inside one call of the transaction layer: between an
//! index lookup and the version it records, or between two rows of a
//! commit's install. A unit test drives two transaction contexts from one
//! thread and registers a hook here; the code under test calls [`at`] at
//! each point, and the hook runs the other transaction's steps right there.

use std::cell::RefCell;

/// Where the transaction layer stops for a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// `Txn::point` looked the key up and found nothing.
    LookupMissed,
    /// `Txn::point` found the key indexed, and its row absent.
    ReadAbsent,
    /// `Txn::install` is about to install or release its n-th row (n =
    /// rows done so far); `Install(len)` once the last is done.
    Install(usize),
}

type Hook = Box<dyn FnMut(Point) -> bool>;

thread_local! {
    static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// Registers `hook`, called at every point this thread reaches until it
/// returns true (then it is dropped). The hook may run transactions: it is
/// taken out while it runs, so their points do not call it again.
pub(crate) fn set(hook: impl FnMut(Point) -> bool + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
}

/// Drops this thread's hook, if any.
pub(crate) fn clear() {
    HOOK.with(|h| *h.borrow_mut() = None);
}

pub(crate) fn at(p: Point) {
    let Some(mut hook) = HOOK.with(|h| h.borrow_mut().take()) else {
        return;
    };
    if !hook(p) {
        HOOK.with(|h| {
            let mut h = h.borrow_mut();
            if h.is_none() {
                *h = Some(hook);
            }
        });
    }
}
