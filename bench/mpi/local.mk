# bench/mpi: MPI benchmarks and the comparison driver
