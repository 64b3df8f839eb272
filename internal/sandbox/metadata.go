package sandbox

import "net/netip"

// MetadataAddrs are the cloud providers' instance metadata endpoints. A
// sandbox's network refuses them in every mode, unless an --allow-cidr
// names one; they hand out the host's cloud credentials.
func MetadataAddrs() []netip.Addr {
	return []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, OCI, ...
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("169.254.169.123"), // AWS time sync
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("168.63.129.16"),   // Azure wireserver
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("fd00:ec2::23"),    // AWS time sync over IPv6
	}
}

// MetadataNames are the names of metadata endpoints, refused in every
// mode as block-list entries.
func MetadataNames() []string {
	return []string{
		"metadata.google.internal",
		"metadata.goog",
		"instance-data.ec2.internal",
		"metadata.azure.internal",
	}
}
