/* SPDX-License-Identifier: MIT */
/*
 * Compiler attributes, spelled once. PRINTF_ATTR(fmt, args) marks a printf-like function so
 * that -Wformat checks every call: fmt is the 1-based position of the format parameter, args
 * that of the first variadic argument, or 0 for a function that takes a va_list. On a compiler
 * without GNU attributes it expands to nothing.
 */
#ifndef SLUICE_BASE_ATTR_H
#define SLUICE_BASE_ATTR_H

#if defined(__GNUC__) || defined(__clang__)
#define PRINTF_ATTR(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PRINTF_ATTR(fmt, args)
#endif

#endif
