// Process-wide memory barriers through membarrier(2), for asymmetric Dekker pairs: the
// frequent side orders its store and its load with a compiler barrier only, the rare side
// makes every running thread of every registered process execute a full barrier.
#pragma once

namespace mpiv::base {

/// Register this process for global expedited barriers (once; later calls return the
/// first answer). True: heavy_barrier() works and covers this process's threads.
bool membarrier_register() noexcept;

/// A full memory barrier on every running thread of every process registered through
/// membarrier_register() (about 1 us here). False: the call failed (then nothing is
/// ordered); only call it after membarrier_register() returned true.
bool heavy_barrier() noexcept;

} // namespace mpiv::base
