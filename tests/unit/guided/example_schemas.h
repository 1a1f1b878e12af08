#pragma once
// Schemas the guided-decoding tests share.

namespace dgemma::guided::test {

// A Pydantic model with nested models, Optional, list, enum, Literal, datetime and email fields, as
// model_json_schema() writes it.
inline constexpr const char* kPydanticOrder = R"({
  "$defs": {
    "Address": {
      "properties": {
        "street": {"title": "Street", "type": "string"},
        "city": {"title": "City", "type": "string"},
        "zip": {"anyOf": [{"pattern": "^\\d{5}$", "type": "string"}, {"type": "null"}],
                "default": null, "title": "Zip"}
      },
      "required": ["street", "city"], "title": "Address", "type": "object"
    },
    "Status": {"enum": ["pending", "shipped", "delivered"], "title": "Status", "type": "string"},
    "Item": {
      "properties": {
        "sku": {"title": "Sku", "type": "string", "maxLength": 12},
        "quantity": {"title": "Quantity", "type": "integer"},
        "price": {"title": "Price", "type": "number"}
      },
      "required": ["sku", "quantity", "price"], "title": "Item", "type": "object"
    }
  },
  "properties": {
    "order_id": {"format": "uuid", "title": "Order Id", "type": "string"},
    "customer": {"title": "Customer", "type": "string", "minLength": 1},
    "email": {"format": "email", "title": "Email", "type": "string"},
    "created": {"format": "date-time", "title": "Created", "type": "string"},
    "status": {"$ref": "#/$defs/Status"},
    "items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array", "minItems": 1},
    "shipping": {"$ref": "#/$defs/Address"},
    "gift": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": null, "title": "Gift"},
    "kind": {"const": "order", "title": "Kind", "type": "string"}
  },
  "required": ["order_id", "customer", "email", "created", "status", "items", "shipping", "kind"],
  "title": "Order", "type": "object"
})";

// A text of kPydanticOrder that validates.
inline constexpr const char* kPydanticOrderText =
    R"({"order_id": "123e4567-e89b-12d3-a456-426614174000", "customer": "Ada", "email": "ada@example.com", )"
    R"("created": "2024-05-06T07:08:09Z", "status": "shipped", )"
    R"("items": [{"sku": "A-1", "quantity": 2, "price": 9.5}], )"
    R"("shipping": {"street": "1 Main St", "city": "Paris", "zip": "75001"}, "kind": "order"})";

}  // namespace dgemma::guided::test
