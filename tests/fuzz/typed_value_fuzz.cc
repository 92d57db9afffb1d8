// libFuzzer target for typed::ToTypedValue (server/typed), which parses column
// text that comes from the network.
//
// Input layout: a type OID in decimal, '\n', then the value's text, which must
// be UTF-8 as ToTypedValue requires (other text is sent raw, never typed).
// Properties
// checked (abort on failure):
//  * the same input converts the same way twice;
//  * an integer's text is the integer printed; a numeric's, text's or json's
//    typed form is the text itself;
//  * a converted value serializes and parses back equal.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/stubs/common.h"
#include "server/typed/typed_value.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

namespace typed = ::walfeed::server::typed;
using ::walfeed::v1::TypedValue;

[[noreturn]] void Fail(const char* what, absl::string_view text) {
  std::fprintf(stderr, "typed_value_fuzz: %s: %.*s\n", what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == absl::string_view::npos) return 0;
  uint32_t oid = 0;
  if (!absl::SimpleAtoi(input.substr(0, newline), &oid)) return 0;
  const absl::string_view text = input.substr(newline + 1);
  if (!google::protobuf::internal::IsStructurallyValidUTF8(text.data(),
                                                           static_cast<int>(text.size()))) {
    return 0;
  }

  TypedValue first;
  TypedValue second;
  const typed::Conversion conversion = typed::ToTypedValue(oid, text, &first);
  if (typed::ToTypedValue(oid, text, &second) != conversion) Fail("not deterministic", text);
  if (conversion == typed::Conversion::kNone) return 0;
  const std::string bytes = first.SerializeAsString();
  if (bytes != second.SerializeAsString()) Fail("not deterministic", text);
  TypedValue parsed;
  if (!parsed.ParseFromString(bytes) || parsed.SerializeAsString() != bytes) {
    Fail("does not round-trip through the wire", text);
  }
  switch (first.value_case()) {
    case TypedValue::kIntValue:
      if (absl::StrCat(first.int_value()) != text) Fail("an integer is not its text", text);
      break;
    case TypedValue::kDecimalValue:
      if (first.decimal_value() != text) Fail("a numeric is not its text", text);
      break;
    case TypedValue::kStringValue:
      if (first.string_value() != text) Fail("a string is not its text", text);
      break;
    case TypedValue::kJsonValue:
      if (first.json_value() != text) Fail("a json is not its text", text);
      break;
    default:
      break;
  }
  return 0;
}
