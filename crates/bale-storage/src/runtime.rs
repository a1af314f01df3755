//! The async runtime of this process, and the object-store clients built on it.
//!
//! **Invariant:** a runtime (and every client and connection made on it) is
//! used only in the process that created it. The state is keyed by process
//! id: after a `fork` (PyTorch DataLoader workers), the child sees another
//! pid and builds a new runtime and new clients on first use. The parent's
//! are forgotten, never dropped in the child: their threads do not exist
//! there, and closing their sockets could disturb the parent's connections
//! (a forked socket is the same connection).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use object_store::ObjectStore;
use tokio::runtime::Runtime;

use crate::error::{Result, StorageError};

/// What one process holds: its runtime and its clients (by configuration).
struct ProcessState {
    pid: u32,
    runtime: Runtime,
    clients: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

/// The state of the current process, leaked: it lives as long as the process
/// (and, in a forked child, is replaced and never freed).
static CURRENT: AtomicPtr<ProcessState> = AtomicPtr::new(std::ptr::null_mut());

fn state() -> Result<&'static ProcessState> {
    let pid = std::process::id();
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null pointer was leaked from a Box below and is never freed.
    if let Some(s) = unsafe { p.as_ref() }
        && s.pid == pid
    {
        return Ok(s);
    }
    // First use in this process (or the first after a fork): a new runtime.
    // Workers do I/O only (TLS, HTTP); hashing and decompression run on the
    // caller's threads.
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("bale-io")
        .enable_all()
        .build()
        .map_err(|e| StorageError::Runtime(e.to_string()))?;
    let fresh = Box::into_raw(Box::new(ProcessState {
        pid,
        runtime,
        clients: Mutex::new(HashMap::new()),
    }));
    match CURRENT.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked; never freed.
        Ok(_) => Ok(unsafe { &*fresh }),
        Err(won) => {
            // Another thread of this process made one first: use it, and
            // shut ours down (it was made in this process and ran nothing).
            // SAFETY: `fresh` came from Box::into_raw above and was not shared.
            let ours = unsafe { Box::from_raw(fresh) };
            ours.runtime.shutdown_background();
            // SAFETY: as above, a leaked, never-freed pointer.
            match unsafe { won.as_ref() } {
                Some(s) if s.pid == pid => Ok(s),
                _ => Err(StorageError::Runtime(
                    "the runtime changed while it was being made".into(),
                )),
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The client for configuration `key` in this process, built by `build` on first use.
pub(crate) fn client(
    key: &str,
    build: impl FnOnce() -> Result<Arc<dyn ObjectStore>>,
) -> Result<Arc<dyn ObjectStore>> {
    let s = state()?;
    if let Some(c) = lock(&s.clients).get(key) {
        return Ok(Arc::clone(c));
    }
    // Built inside the runtime: clients may look for it when they are made.
    let _guard = s.runtime.enter();
    let c = build()?;
    Ok(Arc::clone(
        lock(&s.clients).entry(key.to_owned()).or_insert(c),
    ))
}

/// Runs `f` inside this process's runtime (clients look for it when they are made).
pub(crate) fn enter<T>(f: impl FnOnce() -> T) -> Result<T> {
    let s = state()?;
    let _guard = s.runtime.enter();
    Ok(f())
}

/// Runs `fut` to completion on this process's runtime and returns its output.
///
/// Callable from any thread, also from inside another async runtime (the
/// future then runs on bale's runtime while this thread waits).
pub(crate) fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let s = state()?;
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(s.runtime.block_on(fut));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    s.runtime.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| StorageError::Runtime("an I/O task stopped before it finished".into()))
}

/// A request running on the runtime in the background; [`Pending::wait`]
/// blocks for its result. Dropping it cancels the request.
#[derive(Debug)]
pub struct Pending<T> {
    /// In a mutex so that a `Pending` is `Sync` (only `wait`, which owns it, receives).
    rx: Mutex<std::sync::mpsc::Receiver<T>>,
    abort: tokio::task::AbortHandle,
}

impl<T: Send + 'static> Pending<T> {
    /// Starts `fut` on this process's runtime.
    pub(crate) fn spawn<F>(fut: F) -> Result<Self>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let s = state()?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let task = s.runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        Ok(Pending {
            rx: Mutex::new(rx),
            abort: task.abort_handle(),
        })
    }

    /// Waits for the result.
    ///
    /// # Errors
    /// [`StorageError::Runtime`] when the task stopped without a result.
    pub fn wait(self) -> Result<T> {
        lock(&self.rx)
            .recv()
            .map_err(|_| StorageError::Runtime("an I/O task stopped before it finished".into()))
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        // Harmless when the task is done: only one still running is stopped.
        self.abort.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_runs_from_plain_threads_and_from_inside_another_runtime() {
        assert_eq!(block_on(async { 7 }).unwrap(), 7);
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let v = other.block_on(async { block_on(async { 8 }).unwrap() });
        assert_eq!(v, 8);
        let p = Pending::spawn(async { 9 }).unwrap();
        assert_eq!(p.wait().unwrap(), 9);
    }

    #[test]
    fn a_forked_child_builds_its_own_runtime_and_it_works() {
        // No cache test's locked file is copied into the child.
        let _fork = crate::fork_guard();
        // The parent's runtime exists and has threads.
        assert_eq!(block_on(async { 1 }).unwrap(), 1);
        let parent = state().unwrap() as *const ProcessState;
        // SAFETY: the child only calls async-signal-unsafe code in the same
        // way a forked Python worker does, then exits with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(|| {
                let child = state().unwrap() as *const ProcessState;
                child != parent && block_on(async { 2 }).unwrap() == 2
            })
            .unwrap_or(false);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child made above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
