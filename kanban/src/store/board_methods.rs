//! The [`Store`](super::Store) methods that are one operation of `ops/` on one board, written
//! once for every backend.

/// Expands, inside an `impl Store`, to every method that runs one operation on one board. `$run`
/// is the backend's macro that runs an operation in one transaction and commits it only if it
/// succeeded: `$run!(self, board, mode, |t| operation)`, where `t` is the backend's
/// [`Backend`](super::backend::Backend) and `mode` is `read`, `write`, or `link` (a write naming
/// other tasks: one missing here but present on another board is a cross-board link).
///
/// Names resolve where it expands: the backend's module imports the `Store` argument types,
/// `ops` and `Backend`, as its own remaining methods need them anyway.
macro_rules! board_methods {
    ($run:ident) => {
        fn board(&self, slug: &BoardSlug) -> StoreFuture<'_, Board> {
            $run!(self, slug, read, |t| t.board_row())
        }

        fn archive_board(&self, slug: &BoardSlug) -> StoreFuture<'_, Board> {
            if slug.is_default() {
                return Box::pin(async {
                    Err(StoreError::DefaultBoardProtected { action: "archived" })
                });
            }
            $run!(self, slug, write, |t| ops::archive_board(t))
        }

        fn create_task(&self, board: &BoardSlug, task: &NewTask) -> StoreFuture<'_, Created> {
            let task = task.clone();
            $run!(self, board, link, |t| ops::create_task(t, &task))
        }

        fn task(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::task(t, &id))
        }

        fn list_tasks(&self, board: &BoardSlug, filter: &TaskFilter) -> StoreFuture<'_, Vec<Task>> {
            let filter = filter.clone();
            $run!(self, board, read, |t| ops::list_tasks(t, &filter))
        }

        fn patch_task(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            patch: &TaskPatch,
        ) -> StoreFuture<'_, Task> {
            let (id, patch) = (id.clone(), patch.clone());
            $run!(self, board, write, |t| ops::patch_task(t, &id, &patch))
        }

        fn assign_task(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            assignee: Option<&str>,
        ) -> StoreFuture<'_, Task> {
            let (id, assignee) = (id.clone(), assignee.map(str::to_string));
            $run!(self, board, write, |t| ops::assign_task(
                t,
                &id,
                assignee.as_deref()
            ))
        }

        fn stats(&self, board: &BoardSlug) -> StoreFuture<'_, BoardStats> {
            $run!(self, board, read, |t| ops::stats(t))
        }

        fn link(&self, board: &BoardSlug, parent: &TaskId, child: &TaskId) -> StoreFuture<'_, ()> {
            let (parent, child) = (parent.clone(), child.clone());
            $run!(self, board, link, |t| ops::link(t, &parent, &child))
        }

        fn unlink(
            &self,
            board: &BoardSlug,
            parent: &TaskId,
            child: &TaskId,
        ) -> StoreFuture<'_, ()> {
            let (parent, child) = (parent.clone(), child.clone());
            $run!(self, board, write, |t| ops::unlink(t, &parent, &child))
        }

        fn links(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, TaskLinks> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::links(t, &id))
        }

        fn task_context<'a>(
            &'a self,
            board: &'a BoardSlug,
            id: &'a TaskId,
        ) -> StoreFuture<'a, TaskContext> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::task_context(t, &id))
        }

        fn board_links(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Link>> {
            $run!(self, board, read, |t| ops::board_links(t))
        }

        fn add_comment(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            author: &str,
            body: &str,
        ) -> StoreFuture<'_, Comment> {
            let (id, author, body) = (id.clone(), author.to_string(), body.to_string());
            $run!(self, board, write, |t| ops::add_comment(
                t, &id, &author, &body
            ))
        }

        fn comments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Comment>> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::comments(t, &id))
        }

        fn events_since(
            &self,
            board: &BoardSlug,
            cursor: EventId,
            limit: usize,
        ) -> StoreFuture<'_, Vec<Event>> {
            $run!(self, board, read, |t| ops::events_since(t, cursor, limit))
        }

        fn task_events(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Event>> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::task_events(t, &id))
        }

        fn runs(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Run>> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::runs(t, &id))
        }

        fn run(&self, board: &BoardSlug, id: RunId) -> StoreFuture<'_, Run> {
            $run!(self, board, read, |t| ops::run(t, id))
        }

        fn record_run_usage(
            &self,
            board: &BoardSlug,
            id: RunId,
            usage: &serde_json::Value,
        ) -> StoreFuture<'_, ()> {
            let usage = usage.clone();
            $run!(self, board, write, |t| ops::record_run_usage(t, id, &usage))
        }

        fn attach(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            file: &NewAttachment,
        ) -> StoreFuture<'_, Attachment> {
            let (id, file) = (id.clone(), file.clone());
            $run!(self, board, write, |t| ops::attach(t, &id, &file))
        }

        fn attachments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Attachment>> {
            let id = id.clone();
            $run!(self, board, read, |t| ops::attachments(t, &id))
        }

        fn attachment_content(
            &self,
            board: &BoardSlug,
            attachment: i64,
        ) -> StoreFuture<'_, Vec<u8>> {
            $run!(self, board, read, |t| ops::attachment_content(
                t, attachment
            ))
        }

        fn remove_attachment(&self, board: &BoardSlug, attachment: i64) -> StoreFuture<'_, ()> {
            $run!(self, board, write, |t| ops::remove_attachment(
                t, attachment
            ))
        }

        fn promote(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<TaskId>> {
            $run!(self, board, write, |t| ops::promote(t))
        }

        fn claim_next(
            &self,
            board: &BoardSlug,
            spec: &ClaimSpec,
        ) -> StoreFuture<'_, Option<Claim>> {
            let spec = spec.clone();
            $run!(self, board, write, |t| ops::claim_next(t, &spec))
        }

        fn claim_many<'a>(
            &'a self,
            board: &'a BoardSlug,
            specs: &'a [ClaimSpec],
        ) -> StoreFuture<'a, Vec<Claim>> {
            let specs = specs.to_vec();
            $run!(self, board, write, |t| ops::claim_many(t, &specs))
        }

        fn claim_task(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            spec: &ClaimSpec,
        ) -> StoreFuture<'_, Claim> {
            let (id, spec) = (id.clone(), spec.clone());
            $run!(self, board, write, |t| ops::claim_task(t, &id, &spec))
        }

        fn heartbeat(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            worker: &WorkerId,
            ttl: Duration,
        ) -> StoreFuture<'_, Lease> {
            let (id, worker) = (id.clone(), worker.clone());
            $run!(self, board, write, |t| ops::heartbeat(t, &id, &worker, ttl))
        }

        fn complete(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            done: &Completion,
        ) -> StoreFuture<'_, Task> {
            let (id, done) = (id.clone(), done.clone());
            $run!(self, board, write, |t| ops::complete(t, &id, &done))
        }

        fn block(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            block: &BlockRequest,
        ) -> StoreFuture<'_, Transitioned> {
            let (id, block) = (id.clone(), block.clone());
            $run!(self, board, write, |t| ops::block(t, &id, &block))
        }

        fn unblock(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
            let id = id.clone();
            $run!(self, board, write, |t| ops::unblock(t, &id))
        }

        fn archive(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Transitioned> {
            let id = id.clone();
            $run!(self, board, write, |t| ops::archive(t, &id))
        }

        fn schedule(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            until: Timestamp,
        ) -> StoreFuture<'_, Task> {
            let id = id.clone();
            $run!(self, board, write, |t| ops::schedule(t, &id, until))
        }

        fn specify(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
            let id = id.clone();
            $run!(self, board, write, |t| ops::specify(t, &id))
        }

        fn request_review(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            summary: Option<&str>,
            worker: Option<&WorkerId>,
        ) -> StoreFuture<'_, Task> {
            let (id, summary, worker) = (id.clone(), summary.map(str::to_string), worker.cloned());
            $run!(self, board, write, |t| ops::request_review(
                t,
                &id,
                summary.as_deref(),
                worker.as_ref(),
            ))
        }

        fn submit_for_review(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            done: &Completion,
        ) -> StoreFuture<'_, Task> {
            let (id, done) = (id.clone(), done.clone());
            $run!(self, board, write, |t| ops::submit_for_review(
                t, &id, &done
            ))
        }

        fn approve_review(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            done: &Completion,
        ) -> StoreFuture<'_, Task> {
            let (id, done) = (id.clone(), done.clone());
            $run!(self, board, write, |t| ops::approve_review(t, &id, &done))
        }

        fn request_changes(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            reason: &str,
        ) -> StoreFuture<'_, Task> {
            let (id, reason) = (id.clone(), reason.to_string());
            $run!(self, board, write, |t| ops::request_changes(
                t, &id, &reason
            ))
        }

        fn reclaim_expired(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Reclaimed>> {
            $run!(self, board, write, |t| ops::reclaim_expired(t))
        }

        fn release(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            worker: &WorkerId,
        ) -> StoreFuture<'_, Transitioned> {
            let (id, worker) = (id.clone(), worker.clone());
            $run!(self, board, write, |t| ops::release(t, &id, &worker))
        }

        fn record_failure(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            failure: &Failure,
        ) -> StoreFuture<'_, FailureOutcome> {
            let (id, failure) = (id.clone(), failure.clone());
            $run!(self, board, write, |t| ops::record_failure(
                t, &id, &failure
            ))
        }

        fn requeue_rate_limited(
            &self,
            board: &BoardSlug,
            id: &TaskId,
            worker: Option<&WorkerId>,
            error: &str,
        ) -> StoreFuture<'_, Task> {
            let (id, worker, error) = (id.clone(), worker.cloned(), error.to_string());
            $run!(self, board, write, |t| ops::requeue_rate_limited(
                t,
                &id,
                worker.as_ref(),
                &error
            ))
        }
    };
}

pub(crate) use board_methods;
