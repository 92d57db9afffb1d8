// A parser for PostgreSQL's array text output (array_out): "{1,2,NULL}",
// "{{1,2},{3,4}}", "{\"a b\",\"say \\\"hi\\\"\"}". Pure: text it does not
// cover (a lower bound other than 1, printed as "[0:1]={...}"; a delimiter
// other than ','; more than 6 dimensions, PostgreSQL's limit) is "not parsed"
// and the caller keeps the text.
#ifndef WALFEED_SERVER_TYPED_PG_ARRAY_TEXT_H_
#define WALFEED_SERVER_TYPED_PG_ARRAY_TEXT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace walfeed::server::typed {

// One level of an array: either sub-arrays or elements, never both.
struct ArrayText {
  struct Element {
    bool null = false;
    std::string text;  // Unquoted and unescaped: the element type's own output.
  };
  std::vector<ArrayText> arrays;
  std::vector<Element> elements;
};

std::optional<ArrayText> ParseArrayText(absl::string_view text);

}  // namespace walfeed::server::typed

#endif  // WALFEED_SERVER_TYPED_PG_ARRAY_TEXT_H_
