package front

import "slurm-llm/endpoints/tomlconf"

// parseFront reads doc's [front] table as the file's loader does
// (endpoints/config), with tiers the tiers of [tiers] and no state_dir.
func parseFront(doc string, tiers ...string) (Config, error) {
	c := DefaultConfig()
	err := tomlconf.Decode("u.toml", []byte(doc),
		func(d *tomlconf.Decoder) { d.Root(map[string]tomlconf.Field{"front": c.Field(d)}) },
		func(d *tomlconf.Decoder) { c.Check(d, tiers, "") })
	return c, err
}
