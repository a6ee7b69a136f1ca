"""The local Vagrant lab: the Vagrantfile and lab.yml (package data) and the code that drives them."""
