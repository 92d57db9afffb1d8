// TypedValue: a column value's text, as PostgreSQL's output function printed
// it, converted to its type's native form (walfeed.v1.TypedValue) for the
// built-in types that have one. Pure: a function of the type and the text,
// which comes from the network and is never trusted: text that does not parse
// as the type prints it gives "no typed form", and the value stays text.
#ifndef WALFEED_SERVER_TYPED_TYPED_VALUE_H_
#define WALFEED_SERVER_TYPED_TYPED_VALUE_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server::typed {

// The OID to convert a column's values by: `type_oid` when it is a built-in
// type with a typed form; for a domain (a user OID whose Type message named a
// pg_catalog base type, so `type_name` is that bare name, e.g. "int4"), the
// base type's OID; 0 when the values have no typed form.
uint32_t TypedOid(uint32_t type_oid, absl::string_view type_name);

// What ToTypedValue made of a value.
enum class Conversion {
  kNone,        // No typed form: the type has none, or the text did not parse.
  kValue,       // `*out` holds the value.
  // `*out` holds SPECIAL_VALUE_OUT_OF_RANGE for the value or for an element
  // of it (a timestamp beyond the year 9999): the column keeps its text too.
  kOutOfRange,
};

// Converts `text`, a value of type `typed_oid` (from TypedOid), into `*out`.
// `text` must be valid UTF-8 (the caller sends other text raw, untyped): the
// string forms carry it unchanged. `*out` is unspecified after kNone.
Conversion ToTypedValue(uint32_t typed_oid, absl::string_view text,
                        walfeed::v1::TypedValue* out);

}  // namespace walfeed::server::typed

#endif  // WALFEED_SERVER_TYPED_TYPED_VALUE_H_
