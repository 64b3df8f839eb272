# agentkernel's HTTP API (agentkernel serve) as a Nomad service job.
#
# The API key is a Nomad variable, never in this file:
#   nomad var put nomad/jobs/agentkernel api_key="$(openssl rand -hex 32)"
# and reaches serve as $AGENTKERNEL_API_KEY. See docs/deploy.md.
job "agentkernel" {
  type = "service"

  group "api" {
    count = 1

    network {
      port "http" {
        static = 18888
      }
    }

    service {
      name     = "agentkernel"
      port     = "http"
      provider = "nomad"

      check {
        name     = "health"
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "serve" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/agentkernel"
        args = [
          "serve",
          "--host", "0.0.0.0",
          "--port", "18888",
          # The names clients use for the API (serve answers no other Host).
          "--allowed-host", "agentkernel.service.consul",
        ]
      }

      template {
        data        = <<-EOT
        {{ with nomadVar "nomad/jobs/agentkernel" }}AGENTKERNEL_API_KEY={{ .api_key }}{{ end }}
        EOT
        destination = "secrets/api-key.env"
        env         = true
        perms       = "0400"
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
