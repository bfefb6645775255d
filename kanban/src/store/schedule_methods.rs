//! The [`Store`](super::Store) methods for schedules, written once for every backend like
//! `board_methods.rs`: each runs one operation of `ops/schedules.rs` in one transaction.

/// Expands, inside an `impl Store`, to the schedule methods; `$run` is the backend's macro
/// that runs an operation in one transaction (see `board_methods!`).
macro_rules! schedule_methods {
    ($run:ident) => {
        fn create_job(
            &self,
            board: &BoardSlug,
            job: &crate::schedule::NewJob,
        ) -> StoreFuture<'_, crate::schedule::Job> {
            let job = job.clone();
            $run!(self, board, write, |t| ops::create_job(t, &job))
        }

        fn jobs(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<crate::schedule::Job>> {
            $run!(self, board, read, |t| ops::jobs(t))
        }

        fn job(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, crate::schedule::Job> {
            let key = key.to_string();
            $run!(self, board, read, |t| ops::job(t, &key))
        }

        fn update_job(
            &self,
            board: &BoardSlug,
            key: &str,
            patch: &crate::schedule::JobPatch,
        ) -> StoreFuture<'_, crate::schedule::Job> {
            let (key, patch) = (key.to_string(), patch.clone());
            $run!(self, board, write, |t| ops::update_job(t, &key, &patch))
        }

        fn delete_job(
            &self,
            board: &BoardSlug,
            key: &str,
        ) -> StoreFuture<'_, crate::schedule::Job> {
            let key = key.to_string();
            $run!(self, board, write, |t| ops::delete_job(t, &key))
        }

        fn job_history(
            &self,
            board: &BoardSlug,
            key: &str,
            limit: usize,
        ) -> StoreFuture<'_, Vec<crate::schedule::JobRun>> {
            let key = key.to_string();
            $run!(self, board, read, |t| ops::job_history(t, &key, limit))
        }

        fn run_job_now(
            &self,
            board: &BoardSlug,
            key: &str,
        ) -> StoreFuture<'_, crate::schedule::JobRun> {
            let key = key.to_string();
            $run!(self, board, write, |t| ops::run_job_now(t, &key))
        }

        fn note_sweep(&self, board: &BoardSlug) -> StoreFuture<'_, ()> {
            $run!(self, board, write, |t| ops::note_sweep(t))
        }

        fn fire_next_job(
            &self,
            board: &BoardSlug,
        ) -> StoreFuture<'_, Option<crate::schedule::JobRun>> {
            $run!(self, board, write, |t| ops::fire_next_job(t))
        }
    };
}

pub(crate) use schedule_methods;
