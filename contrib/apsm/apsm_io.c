/*
 * Non-blocking MPI-IO interceptors (seed 002, §3.3).
 *
 * The application's thread only records the call; the progress thread performs it, so that
 * the file access overlaps the application's work. The progress thread uses the blocking call
 * (MPI_File_read_at for MPI_File_iread_at, and so on) and then completes the generalized
 * request with its status:
 * - ROMIO (MPICH's MPI-IO) performs a non-blocking access synchronously inside MPI_File_iread*
 *   unless it was built with AIO, so the non-blocking call would block the progress thread
 *   just the same (this is the reason for §3.3).
 * - Open MPI 4.1's ompio keeps its pending requests in a global list without a lock and walks
 *   it in opal_progress from whatever thread calls MPI; when a second thread creates or frees
 *   ompio requests, the process crashes (observed here: SIGSEGV in mca_common_ompio_progress
 *   while the application waited). Blocking calls create no such requests.
 * The price: the file accesses of one process are performed one after the other, and while
 * one runs the progress thread completes no point-to-point request.
 *
 * Deferring the access must not change what it touches:
 * - The individual file pointer moves when the call is made (MPI 4.0 §14.4.3). The interceptor
 *   reads the pointer, moves it past the access with MPI_File_seek, and queues an _at access at
 *   the old position; a blocking read right after MPI_File_iread therefore reads the next
 *   block, as without APSM. apsm_pointer_lock keeps this pair atomic among intercepted calls.
 *   Files opened with MPI_MODE_SEQUENTIAL allow no _at access: those calls go straight to the
 *   library.
 * - A derived datatype may be freed by the application right after the call: the op holds a
 *   duplicate until the access is done.
 * - The shared file pointer cannot be claimed without a collective, so _shared calls are
 *   performed as they are. MPI leaves the order of shared-pointer accesses unspecified
 *   (§14.4.4), but a blocking shared-pointer access that this process makes before the
 *   progress thread performed its earlier _shared call may come first.
 * An error of a deferred access is printed and returned by the completion call (Wait/Test)
 * instead of by the MPI_File_i* call itself. An invalid derived datatype is caught by the
 * datatype calls made here, on the error handler the library uses for datatypes.
 */
#define _POSIX_C_SOURCE 200809L
#include "apsm.h"

static pthread_mutex_t apsm_pointer_lock = PTHREAD_MUTEX_INITIALIZER;

int apsm_io_run(enum apsm_kind kind, const struct apsm_io_args *io, MPI_Status *status)
{
    switch (kind) {
    case APSM_OP_IREAD_AT:
        return PMPI_File_read_at(io->fh, io->offset, io->buf.rd, io->count, io->type, status);
    case APSM_OP_IWRITE_AT:
        return PMPI_File_write_at(io->fh, io->offset, io->buf.wr, io->count, io->type, status);
    case APSM_OP_IREAD_SHARED:
        return PMPI_File_read_shared(io->fh, io->buf.rd, io->count, io->type, status);
    case APSM_OP_IWRITE_SHARED:
        return PMPI_File_write_shared(io->fh, io->buf.wr, io->count, io->type, status);
    case APSM_OP_P2P:
        break;
    }
    return MPI_ERR_INTERN;
}

/* The non-blocking call an op of this kind stands for, made in the caller's thread when the
 * op cannot be queued. */
static int apsm_io_start(enum apsm_kind kind, const struct apsm_io_args *io,
                         MPI_Request *request)
{
    switch (kind) {
    case APSM_OP_IREAD_AT:
        return PMPI_File_iread_at(io->fh, io->offset, io->buf.rd, io->count, io->type, request);
    case APSM_OP_IWRITE_AT:
        return PMPI_File_iwrite_at(io->fh, io->offset, io->buf.wr, io->count, io->type, request);
    case APSM_OP_IREAD_SHARED:
        return PMPI_File_iread_shared(io->fh, io->buf.rd, io->count, io->type, request);
    case APSM_OP_IWRITE_SHARED:
        return PMPI_File_iwrite_shared(io->fh, io->buf.wr, io->count, io->type, request);
    case APSM_OP_P2P:
        break;
    }
    return MPI_ERR_INTERN;
}

void apsm_io_drop_type(struct apsm_io_args *io)
{
    if (io->type_owned) {
        PMPI_Type_free(&io->type);
        io->type_owned = false;
    }
}

static bool apsm_type_is_named(MPI_Datatype type)
{
    int nints, naddrs, ntypes, combiner = MPI_COMBINER_NAMED;
    PMPI_Type_get_envelope(type, &nints, &naddrs, &ntypes, &combiner);
    return MPI_COMBINER_NAMED == combiner;
}

/*
 * Claim the region an individual-pointer access of count x type covers: *offset receives the
 * current position and the pointer moves past the region. *direct is set instead when the
 * call must go to the library unchanged (sequential file, or a datatype that is no whole
 * number of etypes: the library reports that). Returns an MPI error code.
 */
static int apsm_claim_pointer(MPI_File fh, int count, MPI_Datatype type, MPI_Offset *offset,
                              bool *direct)
{
    int amode = 0;
    MPI_Offset disp = 0;
    MPI_Datatype etype = MPI_DATATYPE_NULL, filetype = MPI_DATATYPE_NULL;
    char datarep[MPI_MAX_DATAREP_STRING];
    MPI_Count type_size = 0, etype_size = 0;

    *direct = false;
    int rc = PMPI_File_get_amode(fh, &amode);
    if (MPI_SUCCESS != rc) {
        return rc;
    }
    if (amode & MPI_MODE_SEQUENTIAL) {
        *direct = true;
        return MPI_SUCCESS;
    }
    rc = PMPI_File_get_view(fh, &disp, &etype, &filetype, datarep);
    if (MPI_SUCCESS != rc) {
        return rc;
    }
    PMPI_Type_size_x(etype, &etype_size);
    /* MPI_File_get_view returns new handles for derived types; the caller frees them. */
    if (!apsm_type_is_named(etype)) {
        PMPI_Type_free(&etype);
    }
    if (!apsm_type_is_named(filetype)) {
        PMPI_Type_free(&filetype);
    }
    rc = PMPI_Type_size_x(type, &type_size);
    if (MPI_SUCCESS != rc || etype_size <= 0 || 0 != (count * type_size) % etype_size) {
        *direct = true;
        return MPI_SUCCESS;
    }
    pthread_mutex_lock(&apsm_pointer_lock);
    rc = PMPI_File_get_position(fh, offset);
    if (MPI_SUCCESS == rc) {
        rc = PMPI_File_seek(fh, (MPI_Offset) (count * type_size / etype_size), MPI_SEEK_CUR);
    }
    pthread_mutex_unlock(&apsm_pointer_lock);
    return rc;
}

/* Queue an MPI-IO call; if that fails, make it here (the application always gets a request). */
static int apsm_io_submit(enum apsm_kind kind, const char *call, const struct apsm_io_args *io,
                          MPI_Request *request)
{
    struct apsm_op *op = apsm_op_new(kind, call);
    if (NULL == op) {
        return apsm_io_start(kind, io, request);
    }
    op->io = *io;
    if (!apsm_type_is_named(io->type)) {
        if (MPI_SUCCESS != PMPI_Type_dup(io->type, &op->io.type)) {
            apsm_op_discard(op);
            return apsm_io_start(kind, io, request);
        }
        op->io.type_owned = true;
    }
    if (MPI_SUCCESS != apsm_op_submit(op, request)) {
        apsm_io_drop_type(&op->io);
        apsm_op_discard(op);
        return apsm_io_start(kind, io, request);
    }
    return MPI_SUCCESS;
}

MPIV_API int MPI_File_iread_at(MPI_File fh, MPI_Offset offset, void *buf, int count,
                               MPI_Datatype datatype, MPI_Request *request)
{
    if (!apsm_on()) {
        return PMPI_File_iread_at(fh, offset, buf, count, datatype, request);
    }
    struct apsm_io_args io = {.fh = fh, .offset = offset, .buf.rd = buf, .count = count,
                              .type = datatype};
    return apsm_io_submit(APSM_OP_IREAD_AT, "MPI_File_iread_at", &io, request);
}

MPIV_API int MPI_File_iwrite_at(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                                MPI_Datatype datatype, MPI_Request *request)
{
    if (!apsm_on()) {
        return PMPI_File_iwrite_at(fh, offset, buf, count, datatype, request);
    }
    struct apsm_io_args io = {.fh = fh, .offset = offset, .buf.wr = buf, .count = count,
                              .type = datatype};
    return apsm_io_submit(APSM_OP_IWRITE_AT, "MPI_File_iwrite_at", &io, request);
}

MPIV_API int MPI_File_iread(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                            MPI_Request *request)
{
    bool direct = false;
    struct apsm_io_args io = {.fh = fh, .buf.rd = buf, .count = count, .type = datatype};
    if (!apsm_on()) {
        return PMPI_File_iread(fh, buf, count, datatype, request);
    }
    int rc = apsm_claim_pointer(fh, count, datatype, &io.offset, &direct);
    if (MPI_SUCCESS != rc || direct) {
        return MPI_SUCCESS != rc ? rc : PMPI_File_iread(fh, buf, count, datatype, request);
    }
    return apsm_io_submit(APSM_OP_IREAD_AT, "MPI_File_iread", &io, request);
}

MPIV_API int MPI_File_iwrite(MPI_File fh, const void *buf, int count, MPI_Datatype datatype,
                             MPI_Request *request)
{
    bool direct = false;
    struct apsm_io_args io = {.fh = fh, .buf.wr = buf, .count = count, .type = datatype};
    if (!apsm_on()) {
        return PMPI_File_iwrite(fh, buf, count, datatype, request);
    }
    int rc = apsm_claim_pointer(fh, count, datatype, &io.offset, &direct);
    if (MPI_SUCCESS != rc || direct) {
        return MPI_SUCCESS != rc ? rc : PMPI_File_iwrite(fh, buf, count, datatype, request);
    }
    return apsm_io_submit(APSM_OP_IWRITE_AT, "MPI_File_iwrite", &io, request);
}

MPIV_API int MPI_File_iread_shared(MPI_File fh, void *buf, int count, MPI_Datatype datatype,
                                   MPI_Request *request)
{
    if (!apsm_on()) {
        return PMPI_File_iread_shared(fh, buf, count, datatype, request);
    }
    struct apsm_io_args io = {.fh = fh, .buf.rd = buf, .count = count, .type = datatype};
    return apsm_io_submit(APSM_OP_IREAD_SHARED, "MPI_File_iread_shared", &io, request);
}

MPIV_API int MPI_File_iwrite_shared(MPI_File fh, const void *buf, int count,
                                    MPI_Datatype datatype, MPI_Request *request)
{
    if (!apsm_on()) {
        return PMPI_File_iwrite_shared(fh, buf, count, datatype, request);
    }
    struct apsm_io_args io = {.fh = fh, .buf.wr = buf, .count = count, .type = datatype};
    return apsm_io_submit(APSM_OP_IWRITE_SHARED, "MPI_File_iwrite_shared", &io, request);
}
