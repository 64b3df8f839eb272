package runcli

import (
	"errors"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/templates"
)

// UseTemplate resolves the template spec names ('--template' of run and
// 'sandbox create': a file, a local or a built-in template) and makes it
// a layer of every configuration this App loads from now on, above the
// user's file and below the project's agentkernel.toml and the flags.
// Errors are *ExitError, code 125.
func (a *App) UseTemplate(spec string) error {
	t, err := templates.Resolve(spec, a.DataDir)
	if err != nil {
		return TemplateError(err)
	}
	a.template = t
	return nil
}

// TemplateError is err of package templates as an *ExitError (125) with
// a hint.
func TemplateError(err error) error {
	hint := "see 'agentkernel template list' for the templates there are"
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		hint = "fix the template file"
	case errors.Is(err, templates.ErrGitHubOffline):
		hint = "agentkernel fetches no templates: save the file and give its path to --template, or add it with 'agentkernel template add NAME FILE'"
	case errors.Is(err, templates.ErrBuiltin):
		hint = "a local template of the same name hides a built-in: 'agentkernel template add NAME FILE'"
	}
	return &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
}

// loadOptions are the configuration layers for a command run in dir:
// the user file, the template (UseTemplate), --config or
// dir/agentkernel.toml.
func (a *App) loadOptions(dir string) config.LoadOptions {
	o := config.LoadOptions{Path: a.ConfigPath, Dir: dir}
	if a.template != nil {
		o.Template = a.template.Layer()
	}
	return o
}

// LoadOptions is loadOptions for agentkernel-full's commands.
func (a *App) LoadOptions(dir string) config.LoadOptions { return a.loadOptions(dir) }
