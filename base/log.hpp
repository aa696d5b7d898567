// Logging for the core. The core never links OPAL: it logs through a handler that the
// embedding layer may replace (the PML routes it to opal_output); the default handler
// writes to stderr when the level is at most $MPIV_VERBOSE (default 0: errors only).
#pragma once

namespace mpiv::base {

enum class log_level : int { error = 0, warn = 1, info = 2, debug = 3 };

using log_func = void (*)(int level, const char *message, void *ctx);

/// Replace the handler (nullptr restores the default). Thread-safe.
void set_log_handler(log_func func, void *ctx) noexcept;

/// Format and emit one line at @p level. Thread-safe; never throws.
void log(log_level level, const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

} // namespace mpiv::base
