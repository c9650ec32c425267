# Turns one file into a C source that defines it as a byte array, so the binary carries it:
#   cmake -DIN=FILE -DOUT=FILE.c -DNAME=symbol -P embed.cmake
# defines `const unsigned char NAME[]` (the bytes, then a NUL not counted) and `const size_t NAME_len`.
# Used by CMakeLists.txt for the web page that `pith serve` answers GET / with (src/server/web.c).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR len "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])" "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
get_filename_component(base "${IN}" NAME)
file(WRITE "${OUT}.tmp"
  "/* Generated from ${base} by assets/web/embed.cmake at build time; do not edit. */\n"
  "#include <stddef.h>\n"
  "extern const unsigned char ${NAME}[];\n"
  "extern const size_t ${NAME}_len;\n"
  "const unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
  "const size_t ${NAME}_len = ${len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
