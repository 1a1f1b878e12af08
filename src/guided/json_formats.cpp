#include "guided/json_formats.h"

namespace dgemma::guided {
namespace {

// Years 0001..9999.
#define DG_YEAR "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
// Leap years among them: divisible by 4 but not by 100, or by 400.
#define DG_LEAP_YEAR "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
#define DG_MONTH_DAY \
  "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define DG_DATE "(" DG_YEAR "-" DG_MONTH_DAY "|" DG_LEAP_YEAR "-02-29)"
#define DG_TIME \
  "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define DG_HEX "[0-9a-fA-F]"
#define DG_ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define DG_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

constexpr std::string_view kDate = DG_DATE;
constexpr std::string_view kDateTime = DG_DATE "T" DG_TIME;
constexpr std::string_view kUuid = DG_HEX "{8}-" DG_HEX "{4}-" DG_HEX "{4}-" DG_HEX "{4}-" DG_HEX "{12}";
constexpr std::string_view kEmail = DG_ATOM "(\\." DG_ATOM ")*@" DG_LABEL "(\\." DG_LABEL ")+";

#undef DG_YEAR
#undef DG_LEAP_YEAR
#undef DG_MONTH_DAY
#undef DG_DATE
#undef DG_TIME
#undef DG_HEX
#undef DG_ATOM
#undef DG_LABEL

}  // namespace

std::optional<std::string_view> format_regex(std::string_view format) {
  if (format == "date") return kDate;
  if (format == "date-time") return kDateTime;
  if (format == "uuid") return kUuid;
  if (format == "email") return kEmail;
  return std::nullopt;
}

}  // namespace dgemma::guided
