/* safetensors.h: one .safetensors file, mapped read-only and checked.
 *
 * The format is an 8-byte little-endian header length, a JSON header naming
 * each tensor's dtype, shape and byte range, then the raw data.  Opening a
 * file validates the whole header against the file's size, so a tensor
 * handed out always lies inside the mapping: a damaged or half-downloaded
 * file fails here with a message, never later with a fault. */
#ifndef RL_SAFETENSORS_H
#define RL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/config.h"
#include "kernels/error.h"

#define RL_ST_MAX_DIMS 8

typedef struct rlStTensor {
    char *name;
    rlDtype dtype;
    int ndim;
    int64_t shape[RL_ST_MAX_DIMS];
    const void *data;      /* inside the mapping, aligned to the element size */
    size_t nbytes;
} rlStTensor;

typedef struct rlSafetensors {
    char *path;
    void *map;
    size_t map_len;
    rlStTensor *tensors;   /* in header order */
    int n_tensors;
} rlSafetensors;

/* Maps path and checks its header.  Errors (RL_EMODEL) name the file and
 * tell truncation, a corrupt header, an unsupported dtype, a GGUF file and a
 * PyTorch pickle apart. */
int safetensors_open(rlSafetensors *st, const char *path, rlError *err);

void safetensors_close(rlSafetensors *st);

#endif
