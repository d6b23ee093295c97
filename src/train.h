/* train.h — training a Transformer from a config (paper section 5): see
 * train.c for the update, the run directory and resuming. */
#ifndef TFM_TRAIN_H
#define TFM_TRAIN_H

#include "config.h"

/* Train, or resume, the run that c describes (its [train] dir). Takes c
 * over (frees it; *c is zeroed). config_path is named in the logs (how to
 * resume). Returns 0 when the run ends (max_steps / max_epochs / max_time,
 * early stopping, nothing left to do, or SIGINT / SIGTERM: checkpoint
 * written), or -1 + errorf. */
int train_run(Config *c, const char *config_path);

#endif
