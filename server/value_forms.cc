#include "server/value_forms.h"

#include "server/typed/typed_value.h"

namespace walfeed::server {
namespace {

void ApplyTo(ValueForm form,
             google::protobuf::RepeatedPtrField<walfeed::v1::ColumnValue>* values) {
  for (walfeed::v1::ColumnValue& value : *values) {
    if (value.kind() != walfeed::v1::VALUE_KIND_TEXT) continue;
    const uint32_t oid = typed::TypedOid(value.type_oid(), value.type_name());
    const typed::Conversion conversion = typed::ToTypedValue(oid, value.text(), value.mutable_typed());
    if (conversion == typed::Conversion::kNone) {
      value.clear_typed();
    } else if (conversion == typed::Conversion::kValue && form == ValueForm::kTyped) {
      value.clear_text();
    }
  }
}

}  // namespace

void ApplyValueForm(ValueForm form, walfeed::v1::ChangeEvent* event) {
  if (form == ValueForm::kText) return;
  ApplyTo(form, event->mutable_new_values());
  ApplyTo(form, event->mutable_old_values());
}

bool TranscodeFull(const std::string& full, ValueForm form, std::string* out) {
  walfeed::v1::ChangeEvent event;
  if (!event.ParseFromString(full)) return false;
  ApplyValueForm(form, &event);
  return event.SerializeToString(out);
}

}  // namespace walfeed::server
