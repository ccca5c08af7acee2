package relations

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// ErrSetting is wrapped by ParseSetting's errors.
var ErrSetting = errors.New("relations: bad setting")

// ParseSetting checks one properties key and value as the properties file
// would (same types, bounds and messages) and returns the Properties with
// it set (every other key at its default). value is a TOML value; a bare
// word that is not one (500ms, debug) is taken as a string. Errors name the
// key and what is wrong, without the file and line of a properties file.
func ParseSetting(key, value string) (*Properties, error) {
	if !slices.Contains(allKeys, key) || !strings.Contains(key, ".") && tableKeys[key] != nil {
		near := text.Closest(key, allKeys, max(2, len(key)/3))
		if near != "" {
			return nil, fmt.Errorf("%w: unknown key %q; did you mean %q?", ErrSetting, key, near)
		}
		return nil, fmt.Errorf("%w: unknown key %q", ErrSetting, key)
	}
	lit := value
	var probe map[string]any
	if _, err := toml.Decode("v = "+value, &probe); err != nil || strings.ContainsAny(value, "\n\r") {
		lit = quoteTOML(value)
	}
	doc := fmt.Sprintf("name = \"set\"\n%s = %s\n", key, lit)
	props, err := ParseProperties("", []byte(doc), "set")
	if err != nil {
		var pe *PropertiesError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%w: %s: %s", ErrSetting, key, pe.Msg)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrSetting, key, err)
	}
	return props, nil
}
