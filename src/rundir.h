/* rundir.h — the run directory of `tfm train` ([train] dir): its file names,
 * its training checkpoints (listed, checked, pruned, set aside), the
 * clean-up of interrupted writes and the one-trainer lock.
 * The files themselves are checkpoints (checkpoint.h).
 */
#ifndef TFM_RUNDIR_H
#define TFM_RUNDIR_H

/* ---- the run directory -------------------------------------------------
 * One training run ([train] dir) holds:
 *   checkpoint-<step, zero-padded to 8 digits>.safetensors
 *                        training checkpoints (weights + Adam + position),
 *                        e.g. checkpoint-00012000.safetensors
 *   best.safetensors     the model with the best validation score
 *   average.safetensors  the average of the last checkpoints (tfm average)
 * All are written with st_write, so none is ever half-written. */
#define CHECKPOINT_BEST "best.safetensors"
#define CHECKPOINT_AVERAGE "average.safetensors"
/* RUN_DIR/checkpoint-%08ld.safetensors, malloc'd. */
char *checkpoint_path(const char *run_dir, long step);
/* RUN_DIR/NAME (e.g. CHECKPOINT_BEST), malloc'd. */
char *checkpoint_run_file(const char *run_dir, const char *name);
/* The step in a training checkpoint's file name, or -1 if `path` is not one. */
long checkpoint_step(const char *path);
/* The training checkpoints in run_dir, sorted by step (oldest first; the
 * latest, for resume, is (*paths)[n-1]). Returns n (0 if run_dir does not
 * exist), or -1 + errorf. Free with checkpoint_list_free. */
int checkpoint_list(const char *run_dir, char ***paths);
void checkpoint_list_free(char **paths, int n);
/* 0 if `path` is a training checkpoint that loads whole (checkpoint_verify:
 * the file, its config and tokenizer, every weight, the training state,
 * checked a piece at a time: a few pages of memory), else -1 + errorf.
 * Checked, never guessed from the name. */
int checkpoint_check(const char *path);
/* A checkpoint that does not load: renamed to PATH.corrupt, with a warning
 * naming both and `why`; never deleted, never averaged. -1 + errorf if the
 * rename fails. */
int checkpoint_set_aside(const char *path, const char *why);
/* Keep the newest `keep` training checkpoints that load and delete the
 * older ones. `current` (the checkpoint this run has just written; NULL:
 * none) is never deleted and counts as one of them. A newer checkpoint that
 * does not load is set aside, not counted: a damaged file never makes a good
 * one go. Returns the number deleted, or -1 + errorf. */
int checkpoint_prune(const char *run_dir, int keep, const char *current);
/* The newest `want` training checkpoints that load (want < 0: all), oldest
 * first; those that do not load on the way are set aside. Returns the count
 * (free with checkpoint_list_free), or -1 + errorf. */
int checkpoint_list_good(const char *run_dir, int want, char ***paths);
/* Remove the temporary files (NAME.tmp.<pid>) of every kind that processes
 * no longer running left in run_dir (an interrupted checkpoint, corpus cache
 * or log rewrite); with `only`, just ONLY.tmp.<pid> (the BPE model, which
 * may live elsewhere). tfm train calls it at the start. Returns the count. */
int run_dir_clean(const char *run_dir, const char *only);
/* One trainer per run directory: checks that run_dir is a directory tfm can
 * write in (before any work), then takes an exclusive lock on
 * RUN_DIR/train.lock (fcntl: it goes with the process, kill -9 included, so
 * nothing stale is left) and writes its PID there. Returns the lock's file
 * descriptor (keep it open while training), or -1 + errorf naming the
 * directory, or the PID of the process that holds the lock. */
int run_dir_lock(const char *run_dir);
#define RUN_DIR_LOCK "train.lock"

#endif
