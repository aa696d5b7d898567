/*
 * User-level context switch for AArch64, AAPCS64.
 *
 * A suspended context is its stack pointer; the 176-byte frame holds, from low to high:
 *   [sp+0]   x19 x20 x21 x22 x23 x24 x25 x26 x27 x28
 *   [sp+80]  x29 (fp) x30 (lr: where the context resumes)
 *   [sp+96]  d8 .. d15 (low halves of v8-v15, callee-saved)
 *   [sp+160] FPCR (floating-point control)    [sp+168] padding
 * Same contract as the x86-64 version (see mpiv_ctx_x86_64_sysv.S).
 */
    .text

/* void *mpiv_ctx_jump(void **save_sp, void *next_sp, void *transfer) */
    .globl  mpiv_ctx_jump
    .hidden mpiv_ctx_jump
    .type   mpiv_ctx_jump, %function
    .p2align 4
mpiv_ctx_jump:
    .cfi_startproc
    sub     sp, sp, #176
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    stp     d8, d9, [sp, #96]
    stp     d10, d11, [sp, #112]
    stp     d12, d13, [sp, #128]
    stp     d14, d15, [sp, #144]
    mrs     x9, fpcr
    str     x9, [sp, #160]
    mov     x9, sp
    str     x9, [x0]
    mov     sp, x1
    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    ldr     x9, [sp, #160]
    msr     fpcr, x9
    add     sp, sp, #176
    mov     x0, x2
    ret
    .cfi_endproc
    .size   mpiv_ctx_jump, .-mpiv_ctx_jump

/* void *mpiv_ctx_make(void *stack_top, void (*entry)(void *transfer, void *arg), void *arg) */
    .globl  mpiv_ctx_make
    .hidden mpiv_ctx_make
    .type   mpiv_ctx_make, %function
    .p2align 4
mpiv_ctx_make:
    .cfi_startproc
    and     x9, x0, #~15
    sub     x9, x9, #176
    stp     x1, x2, [x9, #0]        /* x19 = entry, x20 = arg */
    stp     xzr, xzr, [x9, #16]
    stp     xzr, xzr, [x9, #32]
    stp     xzr, xzr, [x9, #48]
    stp     xzr, xzr, [x9, #64]
    adr     x10, mpiv_ctx_start
    stp     xzr, x10, [x9, #80]     /* fp = 0 ends backtraces; lr = start */
    stp     xzr, xzr, [x9, #96]
    stp     xzr, xzr, [x9, #112]
    stp     xzr, xzr, [x9, #128]
    stp     xzr, xzr, [x9, #144]
    mrs     x10, fpcr
    stp     x10, xzr, [x9, #160]
    mov     x0, x9
    ret
    .cfi_endproc
    .size   mpiv_ctx_make, .-mpiv_ctx_make

/* First code of a fresh context: entry(transfer, arg); x0 already holds transfer. */
    .type   mpiv_ctx_start, %function
    .p2align 4
mpiv_ctx_start:
    .cfi_startproc
    .cfi_undefined x30
    mov     x1, x20
    blr     x19
    brk     #0
    .cfi_endproc
    .size   mpiv_ctx_start, .-mpiv_ctx_start

/* void mpiv_ctx_call(void *arg, void (*fn)(void *arg), void *stack_top)
 * Calls fn(arg) with sp at stack_top (16-byte aligned, exclusive) and returns on the
 * caller's stack once fn returns. x29 (callee-saved) keeps the caller's sp across fn and
 * is the frame's CFA register, so unwinders walk from fn's frames back to the caller's. */
    .globl  mpiv_ctx_call
    .hidden mpiv_ctx_call
    .type   mpiv_ctx_call, %function
    .p2align 4
mpiv_ctx_call:
    .cfi_startproc
    stp     x29, x30, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_offset x29, -16
    .cfi_offset x30, -8
    mov     x29, sp
    .cfi_def_cfa_register x29
    mov     sp, x2
    blr     x1                  /* arg is already in x0 */
    mov     sp, x29
    .cfi_def_cfa_register sp
    ldp     x29, x30, [sp], #16
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size   mpiv_ctx_call, .-mpiv_ctx_call

    .section .note.GNU-stack, "", %progbits
