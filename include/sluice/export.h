/* SPDX-License-Identifier: MIT */
/*
 * What libsluice exports.
 *
 * libsluice is compiled with hidden visibility (-fvisibility=hidden), so its shared object
 * exports only what is declared between SLUICE_API_BEGIN and SLUICE_API_END: the declarations of
 * the public headers in include/sluice/, each of which wraps all of its own. Everything else
 * (every internal function, whatever its name) stays inside the library. A public declaration
 * outside such a block may carry SLUICE_API instead.
 *
 * For a program that includes these headers the macros change nothing: visibility only matters
 * when the library itself is compiled. tests/cli/exports.sh checks that libsluice.so exports
 * exactly the functions and variables declared here.
 */
#ifndef SLUICE_EXPORT_H
#define SLUICE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_API       __attribute__((visibility("default")))
#define SLUICE_API_BEGIN _Pragma("GCC visibility push(default)")
#define SLUICE_API_END   _Pragma("GCC visibility pop")
#else
#define SLUICE_API
#define SLUICE_API_BEGIN
#define SLUICE_API_END
#endif

#endif
