// Dumps the Unicode properties the pre-tokenizers use, from the system ICU (Debian 12: ICU 72 =
// Unicode 15.0), as runs "first last gc white_space script_han age" (gc = ICU UCharCategory).
// Build and run: g++ -O1 icu_props.cpp -o icu_props -licuuc && ./icu_props > icu15.txt
#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <cstdio>

int main() {
  std::printf("# ICU %s, Unicode %s\n", U_ICU_VERSION, U_UNICODE_VERSION);
  auto key = [](UChar32 c, char* buf) {
    UErrorCode err = U_ZERO_ERROR;
    UVersionInfo age;
    u_charAge(c, age);
    std::snprintf(buf, 64, "%d %d %d %d.%d", u_charType(c), u_hasBinaryProperty(c, UCHAR_WHITE_SPACE) ? 1 : 0,
                  uscript_getScript(c, &err) == USCRIPT_HAN ? 1 : 0, age[0], age[1]);
  };
  char cur[64], k[64];
  UChar32 first = 0;
  key(0, cur);
  for (UChar32 c = 1; c <= 0x110000; ++c) {
    if (c < 0x110000) key(c, k);
    if (c == 0x110000 || __builtin_strcmp(k, cur) != 0) {
      std::printf("%X %X %s\n", first, c - 1, cur);
      first = c;
      __builtin_strcpy(cur, k);
    }
  }
}
