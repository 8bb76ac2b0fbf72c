/* fuzz_safetensors.c: libFuzzer target for the safetensors header checks
 * (`make fuzz`): the input is a whole .safetensors file.  Opening it must
 * fail with a message or give tensors that all lie inside the mapping,
 * aligned to their element size, with sizes matching dtype x shape. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/model/safetensors.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    int fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rlSafetensors st;
    rlError err = {0};
    if (safetensors_open(&st, path, &err)) {
        if (!err.msg[0]) abort();
    } else {
        const char *lo = st.map, *hi = lo + st.map_len;
        for (int i = 0; i < st.n_tensors; i++) {
            const rlStTensor *t = &st.tensors[i];
            const char *p = t->data;
            size_t el = rl_dtype_size(t->dtype), n = el;
            for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
            if (t->nbytes != n || (t->nbytes && (p < lo || p + t->nbytes > hi)) || (uintptr_t)p % el) abort();
        }
        safetensors_close(&st);
    }
    close(fd);
    return 0;
}
