/* Stands in for comm_mpi.c in a build without MPI (CMake found no libopenmpi-dev): pith_comm_mpi says so. */
#include "dist/comm.h"

bool pith_dist_have_mpi(void) { return false; }

int pith_comm_mpi(int *argc, char ***argv, pith_comm **out, pith_err *err) {
    (void)argc, (void)argv;
    *out = NULL;
    return pith_errf(err, "this pith was built without MPI (install libopenmpi-dev and rebuild for --tp)");
}
