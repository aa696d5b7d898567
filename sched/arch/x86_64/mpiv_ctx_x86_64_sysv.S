/*
 * User-level context switch for x86-64, System V ABI.
 *
 * A suspended context is its stack pointer; the stack holds, from low to high:
 *   [sp+0]  MXCSR (4 bytes) and x87 control word (2 bytes)   floating-point control
 *   [sp+8]  r12  [sp+16] r13  [sp+24] r14  [sp+32] r15  [sp+40] rbx  [sp+48] rbp
 *   [sp+56] return address
 * Only callee-saved state is kept: the caller of mpiv_ctx_jump treats it as an ordinary
 * call, so the compiler has already spilled everything else.
 * Floating-point *control* state (MXCSR bits 6-15: rounding, masks, FTZ/DAZ; the x87
 * control word) is per context; the MXCSR status flags (bits 0-5) stay with the thread,
 * as FPSR does on AArch64. A control register is reloaded only when the resumed context's
 * value differs: almost every switch finds them equal, and LDMXCSR/FLDCW stall the
 * pipeline (LDMXCSR cost tens of ns per spawn+join when the flags were part of it).
 */
    .text

/* void *mpiv_ctx_jump(void **save_sp, void *next_sp, void *transfer)
 * Saves the running context into *save_sp, resumes next_sp, and returns there with
 * `transfer` as the return value of that context's own mpiv_ctx_jump (or, for a fresh
 * context, as the first argument of its entry function). */
    .globl  mpiv_ctx_jump
    .hidden mpiv_ctx_jump
    .type   mpiv_ctx_jump, @function
    .p2align 4
mpiv_ctx_jump:
    .cfi_startproc
    pushq   %rbp
    pushq   %rbx
    pushq   %r15
    pushq   %r14
    pushq   %r13
    pushq   %r12
    subq    $8, %rsp
    stmxcsr (%rsp)
    fnstcw  4(%rsp)
    movl    (%rsp), %ecx        /* MXCSR of the suspended side */
    movzwl  4(%rsp), %r8d       /* x87 control word of the suspended side */
    movq    %rsp, (%rdi)
    movq    %rsi, %rsp
    movl    (%rsp), %eax
    xorl    %ecx, %eax
    testl   $0xffc0, %eax
    jz      1f
    xorl    %ecx, %eax          /* the resumed side's MXCSR ...                      */
    andl    $0x3f, %ecx
    andl    $-0x40, %eax
    orl     %ecx, %eax          /* ... with the thread's current status flags        */
    movl    %eax, (%rsp)
    ldmxcsr (%rsp)
1:  cmpw    4(%rsp), %r8w
    je      2f
    fldcw   4(%rsp)
2:  addq    $8, %rsp
    popq    %r12
    popq    %r13
    popq    %r14
    popq    %r15
    popq    %rbx
    popq    %rbp
    movq    %rdx, %rax
    /* ret, not an indirect jump. The return-stack predictor's top entry is the
     * suspending side's return address (its call to this function), so the ret is
     * predicted when the resumed side was suspended from the same call site, and so is
     * each return up its call chain as far as the two chains agree: the common case of
     * ULTs that all block in the same call (a blocking MPI_Recv). An indirect jump
     * (`popq %r8; jmpq *%r8`, as Boost.Context does) leaves that entry unconsumed, one
     * entry off for every return of the resumed side, and each of them mispredicts.
     * The price: a switch between two different sites (a ULT and the scheduler, a fresh
     * context's first run) mispredicts this ret once, where the indirect jump's target
     * would have been learned. Measured with bench/mpiv-bench-sched (BM_ult_switch_chain
     * against BM_ult_switch) and ult_pingpong; bench/README.md has the figures. */
    ret
    .cfi_endproc
    .size   mpiv_ctx_jump, .-mpiv_ctx_jump

/* void *mpiv_ctx_make(void *stack_top, void (*entry)(void *transfer, void *arg), void *arg)
 * Builds a suspended context on the stack ending at stack_top (exclusive) whose first
 * resumption calls entry(transfer, arg). The floating-point control state is the
 * caller's. entry must never return. Returns the context's stack pointer. */
    .globl  mpiv_ctx_make
    .hidden mpiv_ctx_make
    .type   mpiv_ctx_make, @function
    .p2align 4
mpiv_ctx_make:
    .cfi_startproc
    movq    %rdi, %rax
    andq    $-16, %rax          /* the frame's top is 16-byte aligned ...            */
    subq    $64, %rax           /* ... so mpiv_ctx_start runs with rsp % 16 == 0     */
    stmxcsr (%rax)
    fnstcw  4(%rax)
    movq    %rsi, 8(%rax)       /* r12 = entry */
    movq    %rdx, 16(%rax)      /* r13 = arg   */
    movq    $0, 24(%rax)
    movq    $0, 32(%rax)
    movq    $0, 40(%rax)
    movq    $0, 48(%rax)        /* rbp = 0 ends frame-pointer backtraces */
    leaq    mpiv_ctx_start(%rip), %rcx
    movq    %rcx, 56(%rax)
    ret
    .cfi_endproc
    .size   mpiv_ctx_make, .-mpiv_ctx_make

/* First code of a fresh context: entry(transfer, arg). */
    .type   mpiv_ctx_start, @function
    .p2align 4
mpiv_ctx_start:
    .cfi_startproc
    .cfi_undefined rip          /* no caller: unwinders stop here */
    movq    %rax, %rdi
    movq    %r13, %rsi
    callq   *%r12
    ud2                         /* entry returned: a bug */
    .cfi_endproc
    .size   mpiv_ctx_start, .-mpiv_ctx_start

/* void mpiv_ctx_call(void *arg, void (*fn)(void *arg), void *stack_top)
 * Calls fn(arg) with the stack pointer at stack_top (16-byte aligned, exclusive) and
 * returns on the caller's stack once fn returns: an ordinary call whose frames go to
 * another stack. No register is saved beyond the call's own: rbp keeps the caller's
 * stack pointer across fn (callee-saved) and is the frame's CFA register, so debuggers
 * and unwinders walk from fn's frames back to the caller's. */
    .globl  mpiv_ctx_call
    .hidden mpiv_ctx_call
    .type   mpiv_ctx_call, @function
    .p2align 4
mpiv_ctx_call:
    .cfi_startproc
    pushq   %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq    %rsp, %rbp
    .cfi_def_cfa_register %rbp
    movq    %rdx, %rsp
    callq   *%rsi               /* arg is already in rdi */
    movq    %rbp, %rsp
    popq    %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size   mpiv_ctx_call, .-mpiv_ctx_call

    .section .note.GNU-stack, "", @progbits
