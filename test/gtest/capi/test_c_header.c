/* The public header is C11: a C program spawns, signals and joins ULTs through it. */
#include <stdint.h>
#include <stdio.h>

#include <mpiv/mpiv.h>

static void *square(void *arg)
{
    uintptr_t v = (uintptr_t) arg;
    return (void *) (v * v);
}

#define CHECK(_call)                                                                     \
    do {                                                                                 \
        mpiv_status_t _s = (_call);                                                      \
        if (MPIV_OK != _s) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #_call,               \
                    mpiv_status_string(_s));                                             \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

int main(void)
{
    mpiv_params_t params = {0};
    mpiv_ult_h h[16];
    uintptr_t i;
    params.field_mask = MPIV_PARAM_FIELD_NUM_WORKERS;
    params.num_workers = 2;
    CHECK(mpiv_init(&params));
    for (i = 0; i < 16; ++i) {
        CHECK(mpiv_spawn(square, (void *) i, MPIV_WORKER_ANY, &h[i]));
    }
    for (i = 0; i < 16; ++i) {
        void *r = NULL;
        CHECK(mpiv_join(h[i], &r));
        if ((uintptr_t) r != i * i) {
            fprintf(stderr, "ULT %lu returned %lu\n", (unsigned long) i, (unsigned long) (uintptr_t) r);
            return 1;
        }
    }
    CHECK(mpiv_finalize());
    printf("1 passed, 0 failed\n");
    return 0;
}
