// helm-render renders a Helm chart's templates as `helm template` does, for the chart test
// (scripts/check-helm). Helm is not packaged for Debian 12, so this is Go's text/template with
// Debian's sprig (golang-github-masterminds-sprig-dev) plus the parts of Helm that charts use:
// values.yaml merged with -f files (a null removes a key), numbers as float64 (as Helm reads
// them, so `{{ .Values.n }}` of 1000000 prints 1e+06 here as it does there), .Release, .Chart,
// .Template, .Files.Get, and the functions include, tpl, required, toYaml, fromYaml and
// toJson; env and expandenv are removed as Helm removes them. Not supported: .Capabilities,
// lookup, subcharts.
//
//	helm-render -chart DIR [-f values.yaml ...] [-name RELEASE] [-namespace NS]
//
// prints every rendered manifest, each after "---" and "# Source: CHART/templates/FILE", and
// exits 1 with the template error on stderr when a template fails.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml2 "gopkg.in/yaml.v2"
	yaml3 "gopkg.in/yaml.v3"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

// files is .Files: the chart's files by path relative to the chart; "" for a missing one.
type files struct{ root string }

func (f files) Get(name string) string {
	b, err := os.ReadFile(filepath.Join(f.root, filepath.FromSlash(name)))
	if err != nil {
		return ""
	}
	return string(b)
}

// readYAML reads one YAML mapping and passes it through JSON, as Helm does, so numbers are
// float64 and maps map[string]interface{}.
func readYAML(path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]interface{}
	if err := yaml3.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	j, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := map[string]interface{}{}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// merge lays src over dst: mappings merge key by key, anything else replaces, null deletes.
func merge(dst, src map[string]interface{}) {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := sv.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
}

// toYAML is Helm's toYaml: through JSON (so float64 integers print as integers), no final
// newline, "" on an error.
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var y interface{}
	if err := yaml2.Unmarshal(j, &y); err != nil {
		return ""
	}
	out, err := yaml2.Marshal(y)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

// fromYAML is Helm's fromYaml: a mapping, or {"Error": message}.
func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml3.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return nil, fmt.Errorf("%s", msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return v, nil
}

// chartObject is .Chart: Chart.yaml's keys with a capital first letter (appVersion →
// AppVersion, apiVersion → APIVersion).
func chartObject(dir string) (map[string]interface{}, error) {
	meta, err := readYAML(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	for k, v := range meta {
		switch k {
		case "apiVersion":
			out["APIVersion"] = v
		default:
			out[strings.ToUpper(k[:1])+k[1:]] = v
		}
	}
	if _, ok := out["Name"].(string); !ok {
		return nil, fmt.Errorf("%s/Chart.yaml: no name", dir)
	}
	return out, nil
}

func run() error {
	chartDir := flag.String("chart", "", "chart directory")
	release := flag.String("name", "release", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	var extra valueFiles
	flag.Var(&extra, "f", "values file laid over the chart's values.yaml (repeatable)")
	flag.Parse()
	if *chartDir == "" || flag.NArg() != 0 {
		return fmt.Errorf("usage: helm-render -chart DIR [-f values.yaml ...] [-name R] [-namespace NS]")
	}

	chart, err := chartObject(*chartDir)
	if err != nil {
		return err
	}
	values, err := readYAML(filepath.Join(*chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range extra {
		v, err := readYAML(f)
		if err != nil {
			return err
		}
		merge(values, v)
	}

	chartName := chart["Name"].(string)
	basePath := chartName + "/templates"
	root := template.New(chartName).Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["required"] = required
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var b strings.Builder
		err := root.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		err = t.Execute(&b, data)
		return strings.ReplaceAll(b.String(), "<no value>", ""), err
	}
	root.Funcs(funcs)

	paths, err := filepath.Glob(filepath.Join(*chartDir, "templates", "*"))
	if err != nil {
		return err
	}
	sort.Strings(paths)
	var names []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := basePath + "/" + filepath.Base(p)
		if _, err := root.New(name).Parse(string(b)); err != nil {
			return err
		}
		names = append(names, name)
	}

	var out strings.Builder
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue
		}
		data := map[string]interface{}{
			"Values": values,
			"Chart":  chart,
			"Files":  files{root: *chartDir},
			"Release": map[string]interface{}{
				"Name": *release, "Namespace": *namespace, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Template": map[string]interface{}{"Name": name, "BasePath": basePath},
		}
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return err
		}
		text := strings.ReplaceAll(b.String(), "<no value>", "")
		if base == "NOTES.txt" || strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(text))
	}
	_, err = os.Stdout.WriteString(out.String())
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helm-render:", err)
		os.Exit(1)
	}
}
