package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// ParseAttributeValue reads the VALUE of `set attribute KEY VALUE`: a TOML
// value (12, 1.5, true, "text", ["ssd", "10g"]) as in [attributes], or,
// when it is not one, the text itself (eu-2 is the string "eu-2").
func ParseAttributeValue(s string) (any, error) {
	var m map[string]any
	if _, err := toml.Decode("v = "+s, &m); err != nil || strings.ContainsAny(s, "\n\r") {
		if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\n\r\x00") {
			return nil, fmt.Errorf("%s is not an attribute value: give a number, true/false, a string or an array of those", text.QuoteShort(s))
		}
		return s, nil
	}
	v := m["v"]
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if msg := attributeScalar(e); msg != "" {
				return nil, fmt.Errorf("%s: %s", text.QuoteShort(s), msg)
			}
		}
		return arr, nil
	}
	if msg := attributeScalar(v); msg != "" {
		return nil, fmt.Errorf("%s: %s", text.QuoteShort(s), msg)
	}
	return v, nil
}

// FormatAttributeValue writes v as the TOML value that ParseAttributeValue
// reads back.
func FormatAttributeValue(v any) string { return renderValue(reflect.ValueOf(v), true) }

// CheckAttributeKey says what is wrong with an attribute name ("" if
// nothing): as a key of [attributes], 1–64 printable characters.
func CheckAttributeKey(k string) string {
	if k == "" || len(k) > 64 || strings.ContainsAny(k, "\n\r\t\x00\"") {
		return fmt.Sprintf("%s is not an attribute name: 1–64 characters, no quotes or control characters", text.QuoteShort(k))
	}
	return ""
}
