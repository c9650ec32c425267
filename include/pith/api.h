/* PITH_API marks what libpith exports: every function declared in these public headers, and nothing
 * else.
 *
 * The library is compiled with -fvisibility=hidden, and the installed libpith.a holds one relocatable
 * object in which every hidden symbol was made local (CMakeLists.txt), so a program linking it sees
 * exactly the functions marked here, all named pith_*: none of the library's internal helpers can clash
 * with the program's own names or be called by it. Invariant: a function declared in include/pith/ is
 * marked PITH_API; tests/test_install.py checks the installed archive against the installed headers. */
#ifndef PITH_API_H
#define PITH_API_H

#if defined(__GNUC__) || defined(__clang__)
#define PITH_API __attribute__((visibility("default")))
#else
#define PITH_API
#endif

#endif
