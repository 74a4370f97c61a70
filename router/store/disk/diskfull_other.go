//go:build !windows

package disk

// diskFullErrnos are the platform's own full-disk errors beyond ENOSPC and EDQUOT: none here.
var diskFullErrnos []error
